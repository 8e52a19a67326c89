"""CPU of the fleet pipeline alone at 100 replicas a second, with each of its speed paths on/off.

No sockets: each second the 100 replicas' bodies (bench/fleet_targets.py's Payload, counters
advancing at a speed of each replica's own) are parsed (promtext.parse), then one
`FleetPipeline.update` of them is timed (process time), after the replicas' 120 s history has
filled. `--without plan` reads every scrape sample by sample (harness/direct_reading.py: no
`scrape_plan`), `--without lookbacks` answers the KV look-backs by scanning each replica's kept
snapshots, as the plain code would, instead of `derive.sliding_max`. Each variant runs in its
own process (the patches are made before the pipeline is built), the variants alternating,
`--rounds` times; the median per poll of each run.

    python bench/bench_fleet_pipeline.py [--rounds 2] [--polls 150] [--full]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from fleet_targets import FIXTURE, Payload, speed_of

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import sample_names
from llmtop.settings import HealthSettings
from llmtop.sim.exposition import restrict

HISTORY_FULL_S = 130
VARIANTS = ("all on", "without plan", "without lookbacks")


class _Scan:
    """`SlidingMax.most` answered by scanning the kept snapshots, newest first."""

    def __init__(self, owner: ScanLookbacks, field: str) -> None:
        self.owner, self.field = owner, field

    def add(self, *args: object) -> None:
        pass

    def most(self, url: str, since: float) -> tuple[float, float, Any] | None:
        best: tuple[float, float, Any] | None = None
        for snap in reversed(self.owner.snaps):
            if snap.time < since:
                break
            for p in snap.engines:
                value = getattr(p, self.field)
                known = p.url == url and p.up and value is not None and value == value
                if known and (best is None or value > best[1]):
                    best = (snap.time, value, (p.kv_cache_usage_frac or 0.0, p.running or 0.0))
        return best


class ScanLookbacks:
    """The pipeline's KV look-backs (`health.lookbacks.Lookbacks`, later `kv_maxima.KvMaxima`)
    as plain scans over its replica's kept snapshots."""

    def __init__(self, window_s: float, history_s: float = float("inf")) -> None:
        self.snaps: deque[Snapshot] = deque()
        self.latest: float | None = None
        self.keep_s = min(max(window_s, 60.0), history_s)
        self.kv_usage = _Scan(self, "kv_cache_usage_frac")
        self.held = _Scan(self, "kv_tokens_per_running")

    def keep(self, snap: Snapshot) -> None:
        self.snaps.append(snap)
        self.latest = snap.time
        while self.snaps[0].time < snap.time - self.keep_s:
            self.snaps.popleft()


def run(variant: str, polls: int, full: bool) -> float:
    """Median CPU ms of one FleetPipeline.update of 100 replicas, history full."""
    if variant == "without plan":
        from llmtop.core.vllm import reader

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # harness
        from harness.direct_reading import extract_direct

        reader.extract = lambda samples, names=None: extract_direct(samples)  # type: ignore[assignment]
    elif variant == "without lookbacks":
        import llmtop.core.pipeline.fleet as fleet_module

        for name in ("Lookbacks", "KvMaxima"):  # the class's name before and after a rename
            if hasattr(fleet_module, name):
                setattr(fleet_module, name, ScanLookbacks)
    from llmtop.core.pipeline.fleet import FleetPipeline

    gc.set_threshold(10_000, 10, 10)  # as `llmtop top` sets it (llmtop.cli.tune_gc)
    keep = promtext.keep_names(sample_names())
    text = FIXTURE.read_text()
    payload = Payload(text if full else restrict(text, set(keep.names)), cache=1000)
    pipeline = FleetPipeline(HealthSettings())
    urls = [f"http://10.0.0.{i}:8000" for i in range(100)]
    spent: list[float] = []
    for second in range(HISTORY_FULL_S + polls):
        bodies = [payload.render(float(second), speed_of(r)).decode() for r in range(100)]
        engines = tuple(
            RawEngine(u, promtext.parse(b, keep)) for u, b in zip(urls, bodies, strict=True)
        )
        c = time.process_time()
        pipeline.update(RawPoll(time=1.8e9 + second, engines=engines))
        if second >= HISTORY_FULL_S:
            spent.append(time.process_time() - c)
    return statistics.median(spent) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--full", action="store_true", help="full bodies (default: narrow ones)")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # a worker
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run(args.variant, args.polls, args.full)))
        return
    got: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            cmd = [sys.executable, __file__, "--variant", variant, "--polls", str(args.polls)]
            out = subprocess.run(
                cmd + (["--full"] if args.full else []),
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).parent,
            )
            got[variant].append(json.loads(out.stdout))
    base = statistics.median(got["all on"])
    print(f"## The fleet pipeline, 100 replicas, {'full' if args.full else 'narrow'} bodies\n")
    print(f"FleetPipeline.update, CPU per poll, median of {args.polls} polls a run, each run's:\n")
    print("| variant | per poll, each run | median | vs all on |\n|---|---:|---:|---:|")
    for variant, runs in got.items():
        shown = " / ".join(f"{v:.1f}" for v in runs)
        m = statistics.median(runs)
        print(f"| {variant} | {shown} ms | {m:.1f} ms | +{m - base:.1f} ms ({m / base:.2f}x) |")


if __name__ == "__main__":
    main()
