#!/usr/bin/env python3
"""The console's first frame with an hour of the past against none, side by side in one run.

`llmtop --vllm SIM --gateway GW --past 1h` and the same with `--no-past`, alternating, each in a
fresh tmux pane (bench_first_frame.py's `one_run` way: the time runs from just before the pane
starts until the sim's KV capacity is on screen). GW stands in for a gateway with history
(harness/past_history.py): its GET /admin/history answers an hour of the demo story (a recorded
real run, its steady minute after the cap played again to an hour) in the recording format,
gzip, as the gateway does. Also timed: until the header says the past is in (`past: gateway 1h`
without `loading`), and in this process the parts of that: reading the hour over HTTP
(`gateway_history`) and folding it through a pipeline (`PastFold`), and the same for the last 11
minutes (`tui.past.FIRST_S`), which the first frame waits for: read, decode, fold.

`--against TREE` adds a third console, `--past 1h` run from another checkout (PYTHONPATH=TREE, an
`git archive` of the commit before a change), alternating with the two: before and after in one
sitting, on the same load.

Usage: python bench/bench_past.py [--runs 8] [--size 120x30] [--against TREE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_first_frame import ROOT, cpu_seconds, start_sim, tmux

from harness.past_history import history_app, history_bytes, lengthen
from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.raw import RawPoll
from llmtop.core.pipeline.past import PastFold
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.recording.reader import read_recording
from llmtop.settings import HealthSettings
from llmtop.sources.history import gateway_history
from llmtop.tui.past import FIRST_S

STORY = ROOT / "tests" / "fixtures" / "demo-story.jsonl.gz"
LOOP = (160, 220)
"""The story's steady minute after the cap."""
PAST_IN = re.compile(r"past: gateway 1h(?! loading)")
TIMEOUT_S = 120.0
"""A loaded box folds the hour slowly."""


@dataclass(frozen=True)
class Run:
    first_frame_s: float
    cpu_s: float
    past_in_s: float | None


def one_run(
    command: list[str], figure: str, size: tuple[int, int], env: dict[str, str], tree: Path = ROOT
) -> Run:
    """`command` in a fresh pane (llmtop from `tree`): seconds until `figure` is on screen (its
    CPU then), and until the header says the past is in (None: not asked)."""
    socket = f"llmtop-past-{os.getpid()}-{time.monotonic_ns()}"
    cmd = f"exec env PYTHONPATH={tree} " + " ".join(command)
    wants_past = "--no-past" not in command
    t0 = time.monotonic()
    tmux(socket, "new-session", "-d", "-s", "b", "-c", "/", "-x", str(size[0]), "-y",
         str(size[1]), cmd, env=env)  # fmt: skip
    try:
        pid = int(tmux(socket, "list-panes", "-t", "b", "-F", "#{pane_pid}").split()[0])
        first = cpu = past = None
        while time.monotonic() - t0 < TIMEOUT_S:
            screen = tmux(socket, "capture-pane", "-p", "-t", "b")
            now = time.monotonic() - t0
            if first is None and figure in screen:
                first, cpu = now, cpu_seconds(pid)
            if wants_past and past is None and PAST_IN.search(screen):
                past = now
            if first is not None and (past is not None or not wants_past):
                return Run(first, cpu or 0.0, past)
            time.sleep(0.01)
        raise SystemExit(
            f"{' '.join(command)}: no {figure!r} or past in {TIMEOUT_S:g} s:\n{screen}"
        )
    finally:
        import subprocess

        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def the_hour() -> tuple[list[RawPoll], dict[str, Any]]:
    """An hour of the story, and its recording's targets."""
    rec = read_recording(STORY)
    base = [rec.raw(i) for i in range(LOOP[1] + 1)]
    return list(lengthen(base, LOOP, base[0].time + 3600.0)), rec.header.get("targets") or {}


@dataclass(frozen=True)
class Parts:
    """Median seconds of the past's parts in this process, for `since_s` of it."""

    polls: int
    read_s: float
    """GET /admin/history and its parse (`gateway_history`)."""
    decode_s: float
    """Each line to a RawPoll (`Recording.raw`), as the console's fold reads them."""
    fold_s: float
    """Through a fresh pipeline (`PastFold`)."""


def parts(url: str, since_s: float, runs: int = 3) -> Parts:
    """The past's parts for the last `since_s`: read, decode, fold (median of `runs`)."""
    reads, decodes, folds, n = [], [], [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        rec = asyncio.run(gateway_history(url, None, since_s))
        t1 = time.perf_counter()
        polls = list(rec)
        t2 = time.perf_counter()
        fold = PastFold(Pipeline(HealthSettings()), polls)
        fold.run()
        t3 = time.perf_counter()
        reads.append(t1 - t0)
        decodes.append(t2 - t1)
        folds.append(t3 - t2)
        n = len(fold.snapshots)
    med = statistics.median
    return Parts(n, med(reads), med(decodes), med(folds))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=8, help="runs of each (default 8)")
    ap.add_argument("--size", default="120x30", help="terminal WxH (default 120x30)")
    ap.add_argument("--against", type=Path, help="another checkout's tree, its --past 1h timed too")
    args = ap.parse_args()
    if args.against is not None and not (args.against / "llmtop" / "__init__.py").is_file():
        raise SystemExit(f"--against {args.against}: no llmtop package there")
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    w, h = (int(x) for x in args.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="llmtop-past-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMTOP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(ROOT)
    env["XDG_CONFIG_HOME"] = str(tmp)
    hour, targets = the_hour()
    body, polls = history_bytes(hour, targets), len(hour)
    gateway = ServerThread(history_app(hour, targets)).start()
    sim, url, figure = start_sim(env, tmp / "sim.log")
    try:
        llmtop = shutil.which("llmtop")
        ours = [llmtop] if llmtop else [sys.executable, "-m", "llmtop"]
        common = [*ours, "--vllm", url, "--gateway", gateway.url]
        kinds = {
            "no past": ([*common, "--no-past"], ROOT),
            "past 1h": ([*common, "--past", "1h"], ROOT),
        }
        if args.against is not None:
            kinds[f"past 1h, {args.against}"] = ([*common, "--past", "1h"], args.against)
        for command, tree in kinds.values():  # once untimed: bytecode compiled, caches warm
            one_run(command, figure, (w, h), env, tree)
        runs: dict[str, list[Run]] = {k: [] for k in kinds}
        for _ in range(args.runs):
            for name, (command, tree) in kinds.items():
                runs[name].append(one_run(command, figure, (w, h), env, tree))
        first = parts(gateway.url, FIRST_S)
        hour_parts = parts(gateway.url, 3600.0)
    finally:
        os.killpg(sim.pid, signal.SIGTERM)
        gateway.stop()
    none = statistics.median(r.first_frame_s for r in runs["no past"])
    print(f"### The console's first frame with an hour of the past ({time.strftime('%Y-%m-%d')})")
    print()
    print(f"{args.runs} runs each, alternating, {w}x{h}; the hour: {polls} polls, "
          f"{len(body) / 1e6:.2f} MB gzip over loopback; load average "
          f"{os.getloadavg()[0]:.1f} at the end.")  # fmt: skip
    print()
    print("| console | first frame, wall (median) | CPU to it | x none | past in (median) |")
    print("|---|---|---|---|---|")
    for name, rs in runs.items():
        ff = statistics.median(r.first_frame_s for r in rs)
        cpu = statistics.median(r.cpu_s for r in rs)
        past = [r.past_in_s for r in rs if r.past_in_s is not None]
        shown = f"{statistics.median(past):.2f} s" if past else "-"
        print(f"| {name} | {ff:.2f} s | {cpu:.2f} s | {ff / none:.2f}x | {shown} |")
    print()
    print("The past's parts, in-process (median of 3): read (`gateway_history`), decode "
          "(`Recording.raw`), fold (`PastFold`):")  # fmt: skip
    print()
    print("| span | polls | read | decode | fold | fold a poll |")
    print("|---|---|---|---|---|---|")
    for label, p in ((f"last {FIRST_S / 60:g} min (the first frame's)", first),
                     ("the hour", hour_parts)):  # fmt: skip
        print(f"| {label} | {p.polls} | {p.read_s:.2f} s | {p.decode_s:.2f} s | "
              f"{p.fold_s:.2f} s | {p.fold_s / max(p.polls, 1) * 1e3:.2f} ms |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
