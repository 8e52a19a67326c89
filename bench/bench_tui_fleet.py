#!/usr/bin/env python3
"""CPU cost of the TUI alone showing 100 replicas that change every second (issue 18 item 4).

The data is real data through the real pipeline: each replica serves the real vLLM 0.32
capture (tests/fixtures/metrics-load.txt, via bench/fleet_targets.Payload: counters advancing
at a rate of its own), its running/waiting/KV gauges moved every second by a seeded random walk
(a few replicas drowning, so findings fire and clear and the worst-first order changes), parsed
by `promtext` and folded by a `FleetPipeline`, all before any measurement. The TUI is the real
`LlmtopApp`, headless (`App.run_test`: layout, render and compositor run; the final conversion
to escape codes and the terminal write do not, see --terminal), with a source that hands it the
next FleetSnapshot each poll at the production 1 s interval, 2 minutes of history preloaded.

The garbage collector's threshold is raised as `llmtop top` raises it (llmtop.cli.tune_gc): at
Python's default, a full collection over the history lands in some windows (~120 ms each).
Measured: `time.process_time()` of this process over `--seconds` of wall time after a warm-up,
side by side with the same app on the same history receiving nothing (the idle baseline: its
timers, the age in the header), alternating idle/fleet windows to spread the machine's load.
The fleet's own cost is the difference. `--terminal` runs the same windows in a real terminal
(a tmux pane, 120x36 / 200x50), where escape codes and writes count too.

Usage: python bench/bench_tui_fleet.py [--seconds 30] [--runs 3] [--terminal] [--windows]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fleet_targets import FIXTURE, Payload  # bench/, beside this file

from llmtop.cli import tune_gc
from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import FleetSnapshot, Snapshot
from llmtop.core.exposition import promtext
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.vllm import VLLM_KEEP

ROOT = Path(__file__).resolve().parents[1]

REPLICAS = 100
HISTORY = 120
"""Seconds of fleet history preloaded (the charts show the last 60)."""
WARMUP_S = 5.0
SIZES = ((120, 36), (200, 50))
START = 1_796_000_000.0
_GAUGE = re.compile(
    r"^(vllm:(?:num_requests_running|num_requests_waiting|kv_cache_usage_perc)\{[^}]*\}) \S+$",
    re.M,
)


def url(i: int) -> str:
    return f"http://10.0.{i // 200}.{i % 200 + 10}:8000"


def fleet_snapshots(polls: int, seed: int = 18) -> list[FleetSnapshot]:
    """`polls` one-second FleetSnapshots of REPLICAS replicas, through the real pipeline."""
    payload = Payload(FIXTURE.read_text())
    rng = random.Random(seed)
    hot = set(rng.sample(range(REPLICAS), 4))
    state = [
        {"running": rng.uniform(1, 12), "waiting": 0.0, "kv": rng.uniform(0.1, 0.7)}
        for _ in range(REPLICAS)
    ]
    pipeline = FleetPipeline(HealthSettings())
    out = []
    for t in range(polls):
        engines = []
        for i, s in enumerate(state):
            s["running"] = min(max(s["running"] + rng.uniform(-1.5, 1.5), 0.0), 16.0)
            s["kv"] = min(max(s["kv"] + rng.uniform(-0.05, 0.05), 0.02), 1.0)
            if i in hot:  # drowning: the queue grows, the cache is full
                s["waiting"] = min(s["waiting"] + rng.uniform(0, 4), 60.0)
                s["kv"] = 1.0
            else:
                s["waiting"] = max(s["waiting"] + rng.uniform(-1, 0.6), 0.0)
            text = with_gauges(payload.render(float(t), 1.0 + i % 7).decode(), s)
            engines.append(RawEngine(url(i), promtext.parse(text, VLLM_KEEP)))
        snap = pipeline.update(RawPoll(time=START + t, engines=tuple(engines)))
        assert isinstance(snap, FleetSnapshot)
        assert snap.fleet is not None
        out.append(snap)
        if t % 40 == 39:  # others start drowning: the worst-first order moves
            hot = set(rng.sample(range(REPLICAS), 4))
    return out


def with_gauges(text: str, state: dict[str, float]) -> str:
    """The capture with this replica's running, waiting and KV usage at this second."""
    values = {
        "vllm:num_requests_running": f"{round(state['running'])}.0",
        "vllm:num_requests_waiting": f"{round(state['waiting'])}.0",
        "vllm:kv_cache_usage_perc": f"{state['kv']:.3f}",
    }
    return _GAUGE.sub(lambda m: f"{m.group(1)} {values[m.group(1).split('{', 1)[0]]}", text)


class FeedSource:
    """Hands the app the next snapshot each poll; `idle`: never answers (the baseline)."""

    def __init__(self, snaps: list[FleetSnapshot], *, idle: bool) -> None:
        self.snaps = snaps
        self.idle = idle
        self.polls = 0

    async def poll(self) -> Snapshot:
        if self.idle or self.polls >= len(self.snaps):
            await asyncio.Event().wait()
        snap = self.snaps[self.polls]
        self.polls += 1
        return snap

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class Window:
    """One measured window: CPU seconds of this process over wall seconds, polls shown."""

    cpu_s: float
    wall_s: float
    polls: int

    @property
    def core_pct(self) -> float:
        return 100.0 * self.cpu_s / self.wall_s


def make_app(history: list[FleetSnapshot], source: FeedSource):  # type: ignore[no-untyped-def]
    from llmtop.tui.app import LlmtopApp

    return LlmtopApp(
        source,
        monitor=MonitorSettings(
            vllm_urls=tuple(url(i) for i in range(REPLICAS)), gateway_url=None, nvml=False
        ),
        health=HealthSettings(),
        admin=None,
        history=history,
    )


async def measure(app, source: FeedSource, seconds: float) -> Window:  # type: ignore[no-untyped-def]
    """Warm up, then CPU over `seconds` of the app running as it runs."""
    from llmtop.tui.widgets.replicas import ReplicaTable

    await app.first_snapshot.wait()
    await asyncio.sleep(WARMUP_S)
    table = app.screen_stack[0].query_one(ReplicaTable)
    assert table.display, "the replica table is not on screen"
    assert table.size.height > 10, table.size
    p0, c0, w0 = source.polls, time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    p1, c1, w1 = source.polls, time.process_time(), time.monotonic()
    return Window(c1 - c0, w1 - w0, p1 - p0)


async def headless_window(
    size: tuple[int, int],
    history: list[FleetSnapshot],
    feed: list[FleetSnapshot],
    *,
    idle: bool,
    seconds: float,
) -> Window:
    source = FeedSource(feed, idle=idle)
    app = make_app(history, source)
    async with app.run_test(size=size):
        return await measure(app, source, seconds)


async def terminal_window(
    history: list[FleetSnapshot],
    feed: list[FleetSnapshot],
    *,
    idle: bool,
    seconds: float,
    out: Path,
) -> None:
    """In a real terminal (run inside a tmux pane by --child): the same window, to a file."""
    source = FeedSource(feed, idle=idle)
    app = make_app(history, source)
    task = asyncio.create_task(app.run_async())
    try:
        w = await measure(app, source, seconds)
    finally:
        app.exit()
        await task
    result = json.dumps({"cpu_s": w.cpu_s, "wall_s": w.wall_s, "polls": w.polls})
    await asyncio.to_thread(out.write_text, result)


def data(seconds: float) -> tuple[list[FleetSnapshot], list[FleetSnapshot]]:
    """(history, feed): the history, then enough polls for one window and its warm-up."""
    snaps = fleet_snapshots(HISTORY + int(WARMUP_S + seconds) + 5)
    return snaps[:HISTORY], snaps[HISTORY:]


def tmux_window(size: tuple[int, int], seconds: float, snaps: Path, *, idle: bool) -> Window:
    """One window in a tmux pane of `size` (a private tmux server, killed after); the child
    reads the polls built here from `snaps` (a pickle)."""
    socket = f"llmtop-bench-fleet-{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "window.json"
        cmd = (
            f"exec {sys.executable} {Path(__file__).resolve()} --child {out} --snaps {snaps} "
            f"--seconds {seconds} {'--idle' if idle else ''}"
        )
        width, height = str(size[0]), str(size[1])
        subprocess.run(
            ["tmux", "-L", socket, "new-session", "-d", "-x", width, "-y", height, cmd],
            check=True,
        )
        try:
            deadline = time.monotonic() + seconds + 180
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            if not out.exists():
                raise SystemExit("the terminal window did not finish")
            time.sleep(0.2)
            r = json.loads(out.read_text())
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    return Window(r["cpu_s"], r["wall_s"], r["polls"])


def summary(windows: list[Window]) -> str:
    pct = [w.core_pct for w in windows]
    return f"{statistics.median(pct):.2f}% ({min(pct):.2f}-{max(pct):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--terminal", action="store_true", help="also in a real terminal (tmux)")
    ap.add_argument("--windows", action="store_true", help="also each window's %% of a core")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--snaps", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--idle", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    tune_gc()  # as `llmtop top` runs (llmtop.cli): the default threshold's full collections
    # over two minutes of a hundred replicas' history cost ~120 ms a window they fall in
    if args.child:
        history, feed = pickle.loads(args.snaps.read_bytes())
        seconds, out = args.seconds, args.child
        window = terminal_window(history, feed, idle=args.idle, seconds=seconds, out=out)
        asyncio.run(window)
        return 0
    t0 = time.monotonic()
    history, feed = data(args.seconds)
    built_s = time.monotonic() - t0
    tmp = tempfile.TemporaryDirectory()
    snaps = Path(tmp.name) / "polls.pickle"
    snaps.write_bytes(pickle.dumps((history, feed)))
    import llmtop

    where = Path(llmtop.__file__).parent
    commit = subprocess.run(
        ["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if where.parent != ROOT:  # the TUI measured is another tree's (a baseline)
        commit = f"{commit} (llmtop from {where.parent})"
    print("## TUI with 100 rows\n")
    print(
        f"`python bench/bench_tui_fleet.py --seconds {args.seconds:g} --runs {args.runs}"
        f"{' --terminal' if args.terminal else ''}{' --windows' if args.windows else ''}`, "
        f"commit {commit}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.2f} at the start. {REPLICAS} replicas of the real capture "
        f"through FleetPipeline ({HISTORY + len(feed)} polls built in {built_s:.0f} s, before any "
        f"measurement), one FleetSnapshot a second; {args.runs} alternating idle/fleet windows "
        f"of {args.seconds:g} s after a {WARMUP_S:g} s warm-up. % of one core: median (min-max).\n"
    )
    print("| where | size | idle (no updates) | fleet at 1 Hz | fleet - idle | CPU per update |")
    print("|---|---|---:|---:|---:|---:|")
    for size in SIZES:
        modes = [("headless", None)] + ([("tmux", size)] if args.terminal else [])
        for where, _ in modes:
            idle: list[Window] = []
            busy: list[Window] = []
            for _ in range(args.runs):
                for is_idle, into in ((True, idle), (False, busy)):
                    if where == "headless":
                        w = asyncio.run(
                            headless_window(size, history, feed, idle=is_idle, seconds=args.seconds)
                        )
                    else:
                        w = tmux_window(size, args.seconds, snaps, idle=is_idle)
                    into.append(w)
            assert all(w.polls == 0 for w in idle)
            assert all(w.polls >= args.seconds - 2 for w in busy), [w.polls for w in busy]
            diff = [b.core_pct - i.core_pct for b, i in zip(busy, idle, strict=True)]
            per = [
                1000.0 * (b.cpu_s - i.cpu_s * b.wall_s / i.wall_s) / b.polls
                for b, i in zip(busy, idle, strict=True)
            ]
            print(
                f"| {where} | {size[0]}x{size[1]} | {summary(idle)} | {summary(busy)} | "
                f"{statistics.median(diff):.2f}% | {statistics.median(per):.1f} ms |",
                flush=True,
            )
            if args.windows:  # one window in a few costs ~1 point more (in every tree)
                each = zip(idle, busy, strict=True)
                pairs = " ".join(f"{i.core_pct:.2f}/{b.core_pct:.2f}" for i, b in each)
                print(f"|   | windows, idle/fleet % | {pairs} | | | |", flush=True)
    print(
        f"\nGoal: the fleet at 1 Hz in <= 5% of one core. Load average "
        f"{os.getloadavg()[0]:.2f} at the end."
    )
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
