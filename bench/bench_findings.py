"""The incident library scored: every recording of tests/fixtures/incidents/ through the
pipeline (a fresh `core.pipeline.Pipeline` per recording, as `llmtop replay` and the report
recompute findings), against its manifest.

Prints a confusion table (class x finding: seconds from the onset to the first poll it held,
with its severity at that poll), the time to name each expected finding against its target,
the extra warnings/criticals on incidents, and false alarms (a warning or critical finding
firing on a healthy run) per healthy hour. Deterministic: the recordings carry their clock.

    PYTHONPATH=. python bench/bench_findings.py [--markdown] [--library DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.recording.reader import read_recording
from llmtop.settings import HealthSettings

LIBRARY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "incidents"
_RANK = {"info": 0, "warning": 1, "critical": 2}
JITTER_S = 0.1
"""A real run's polls are a wall clock's, a few ms off the second its onset is given in."""


@dataclass
class Result:
    """One recording's outcome."""

    name: str
    healthy: bool
    seconds: float
    first: dict[str, tuple[float, str, str]] = field(default_factory=dict)
    """Finding -> (seconds after the onset it first held, its severity then, bottleneck)."""
    worst: dict[str, str] = field(default_factory=dict)
    """Finding -> the highest severity it held at."""
    named: dict[str, float | None] = field(default_factory=dict)
    """Expected finding -> seconds to be named with its bottleneck (None: never)."""
    within: dict[str, float] = field(default_factory=dict)
    false_alarms: list[str] = field(default_factory=list)
    """On a healthy run: each warning/critical firing ("id severity at +s")."""
    max_severity: str | None = None
    """The most any finding may reach on this run (its SLO holds)."""
    engine: str = "vllm"
    """The engine (dialect) it was recorded on or spoken in."""


def score_one(path: Path, entry: dict[str, Any]) -> Result:
    """Run one recording through a fresh pipeline and compare with its manifest entry."""
    rec = read_recording(path)
    pipeline = (FleetPipeline if entry.get("fleet") else Pipeline)(HealthSettings())
    onset = float(entry["onset_s"])
    expected = {e["finding"]: e for e in entry["expect"]}
    start = rec.times[0] if rec.times else 0.0
    end = rec.times[-1] if rec.times else start
    out = Result(entry["class"], bool(entry["healthy"]), end - start)
    out.within = {f: float(e["within_s"]) for f, e in expected.items()}
    out.max_severity = entry.get("max_severity")
    out.engine = entry.get("engine", "vllm")
    out.named = dict.fromkeys(expected)
    alarms_before: set[tuple[str, str]] = set()
    for raw in rec:
        snap = pipeline.update(raw)
        at = raw.time - start
        for f in snap.findings:
            if at >= onset and f.id not in out.first:
                out.first[f.id] = (at - onset, f.severity, f.bottleneck)
            if f.id not in out.worst or _RANK[f.severity] > _RANK[out.worst[f.id]]:
                out.worst[f.id] = f.severity
            want = expected.get(f.id)
            first_named = want is not None and at >= onset and out.named[f.id] is None
            if first_named and want is not None and f.bottleneck == want["bottleneck"]:
                out.named[f.id] = at - onset
        alarms = {(f.id, f.severity) for f in snap.findings if f.severity != "info"}
        if out.healthy:
            out.false_alarms += [f"{i} {sev} at +{at:.0f} s" for i, sev in alarms - alarms_before]
        alarms_before = alarms
    return out


def score(library: Path = LIBRARY) -> list[Result]:
    """Every recording of the library's manifest, scored."""
    manifest = json.loads((library / "manifest.json").read_text())
    return [score_one(library / e["recording"], e) for e in manifest]


def misses(results: list[Result]) -> list[str]:
    """What the library's targets say went wrong: an expected finding not named in time (or
    with another bottleneck), a false alarm on a healthy run."""
    out = []
    for r in results:
        for f, t in r.named.items():
            if t is None:
                out.append(f"{r.name}: {f} never named with its bottleneck")
            elif t > r.within[f] + JITTER_S:
                out.append(f"{r.name}: {f} named at +{t:.0f} s, target {r.within[f]:.0f} s")
        out += [f"{r.name}: false alarm {a}" for a in r.false_alarms]
        if r.max_severity is not None:
            over = [f"{f} {s}" for f, s in r.worst.items() if _RANK[s] > _RANK[r.max_severity]]
            out += [f"{r.name}: {x} (the SLO holds: at most {r.max_severity})" for x in over]
    return out


def table(results: list[Result]) -> str:
    """The confusion table (markdown): class x finding, the first time held after the onset."""
    findings = sorted({f for r in results for f in r.first})
    head = "| class | engine | " + " | ".join(f"`{f}`" for f in findings) + " |"
    lines = [head, "|---|---|" + "---|" * len(findings)]
    for r in results:
        cells = []
        for f in findings:
            got = r.first.get(f)
            mark = "**" if f in r.named else ""
            cells.append("" if got is None else f"{mark}{got[0]:.0f} {r.worst[f][0]}{mark}")
        lines.append(f"| {r.name} | {r.engine} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: list[Result]) -> str:
    """Time to name each expected finding, and false alarms per healthy hour."""
    lines = ["| class | engine | expected | named after onset | target |", "|---|---|---|---|---|"]
    for r in results:
        for f, t in r.named.items():
            shown = "never" if t is None else f"{t:.0f} s"
            named_as = r.first.get(f, (0, "", ""))[2] or "-"
            lines.append(
                f"| {r.name} | {r.engine} | `{f}` ({named_as}) | {shown} | {r.within[f]:.0f} s |"
            )
    healthy = [r for r in results if r.healthy]
    hours = sum(r.seconds for r in healthy) / 3600
    alarms = sum(len(r.false_alarms) for r in healthy)
    infos = sorted({f"{f} ({r.name})" for r in healthy for f in r.first})
    engines = sorted({r.engine for r in healthy})
    lines.append("")
    lines.append(
        "healthy runs by engine: "
        + ", ".join(f"{e} {sum(r.engine == e for r in healthy)}" for e in engines)
    )
    lines.append(
        f"healthy runs: {len(healthy)}, {hours * 60:.1f} minutes; warning/critical findings "
        f"on them: {alarms} ({alarms / hours if hours else 0:.1f} per healthy hour); info "
        f"heads-ups: {', '.join(infos) or 'none'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", type=Path, default=LIBRARY)
    args = ap.parse_args(argv)
    results = score(args.library)
    print(
        "confusion (seconds from onset to first held; c/w/i = worst severity; bold = expected):\n"
    )
    print(table(results))
    print()
    print(report(results))
    wrong = misses(results)
    print("\nmisses: " + ("none" if not wrong else "\n  " + "\n  ".join(wrong)))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
