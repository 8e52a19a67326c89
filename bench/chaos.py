"""The chaos run from the command line: what it does and checks is harness/chaos.py's.

python bench/chaos.py --duration-s 600 --out /tmp/chaos    # the 10-minute run
python bench/chaos.py --duration-s 90                      # what the suite runs
python bench/chaos.py --duration-s 150 --no-faults --load-x 0.7   # a healthy run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.chaos import Run, chaos


def summary(run: Run) -> str:
    o = run.outcomes()
    lines = [
        f"chaos: {len(run.entries)} requests in {run.duration_s:g} s at {run.rate_per_s:.1f}/s"
        f" ({run.rate_per_s / (run.capacity_per_s or 1):.1f}x the measured"
        f" {run.capacity_per_s:.1f}/s)",
        "outcomes: " + ", ".join(f"{k} {o[k]}" for k in sorted(o)),
        "faults: " + ", ".join(f"{i.kind}@{i.at_s:.0f}s" for i, _, _ in run.injections),
    ]
    for n in run.figures.get("named", []):
        lines.append(f"  report: {n['kind']} @{n['at_s']}s -> {n['finding']} (+{n['delay_s']} s)")
    lines.append("problems: " + ("none" if not run.problems else "; ".join(run.problems)))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description="Chaos: the whole stack while its parts fail.")
    p.add_argument("--duration-s", type=float, default=600.0, help="seconds of load (>= 64)")
    p.add_argument("--out", type=Path, help="logs and the recording here (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.add_argument("--load-x", type=float, default=1.5, help="offered load / capacity")
    p.add_argument("--no-faults", action="store_true", help="inject nothing (a healthy run)")
    a = p.parse_args()
    if a.duration_s < 64:
        p.error("--duration-s must be at least 64 (one round of faults)")
    out = a.out or Path(tempfile.mkdtemp(prefix="llmtop-chaos-"))
    if not 0 < a.load_x <= 10:
        p.error("--load-x must be in (0, 10]")
    run = chaos(a.duration_s, out, faults=not a.no_faults, load_x=a.load_x)
    if a.json:
        print((out / "run.json").read_text())
    print(summary(run))
    print(f"logs and recording: {out}")
    return 1 if run.problems else 0


if __name__ == "__main__":
    sys.exit(main())
