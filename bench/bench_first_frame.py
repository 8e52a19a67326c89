#!/usr/bin/env python3
"""Time from launch to the first frame with a figure: `llmtop --vllm SIM` against vllmstat on
the same `llmtop sim`, in a real terminal (tmux), alternating runs; prints a markdown section.

A figure: the sim's KV capacity ("38.8k" for the seed profile), which both monitors print once
their first scrape of /metrics is drawn, and neither can print before. Each run gets a tmux
server of its own (a fresh pane, `exec` so the pane's process is the monitor), polled every
10 ms with capture-pane; the time runs from just before `new-session`, so tmux's own start is in
both figures alike. CPU to the first frame is read from /proc (utime + stime of the pane's
process): it depends less on the box's load than the wall time does. Bytecode is allowed
(PYTHONDONTWRITEBYTECODE dropped) and each monitor runs once untimed first, so both start
from compiled modules as an installed package does (this box sets PYTHONDONTWRITEBYTECODE=1,
which would compile llmtop's ~90 modules from source at every start and vllmstat's none).

vllmstat comes from a throwaway venv (`python3 -m venv /tmp/vllmstat-venv &&
/tmp/vllmstat-venv/bin/pip install vllmstat`); without it, `--baseline` compares against a
minimal Textual app that scrapes the same /metrics with httpx and prints the same figure.
Also printed: `import llmtop.tui.app` against `import vllmstat.app` and `import textual.app`,
each a fresh interpreter, and what `python -X importtime` says llmtop's start-up imports.

`--python PY` runs llmtop as `PY -m llmtop` (this checkout on PYTHONPATH): with a venv of
llmtop's own dependencies (`python3 -m venv /tmp/llmtop-venv && /tmp/llmtop-venv/bin/pip
install . && /tmp/llmtop-venv/bin/pip uninstall -y llmtop-console`), both monitors start in an
environment of their own packages only, as vllmstat does in its venv; this box's main
environment has more (trio, which httpcore imports when it is there: ~0.1 s).

`--also NAME=DIR` adds the llmtop of another checkout (e.g. `git archive` of an earlier commit
unpacked in DIR) as a third monitor in the same alternation: before and after side by side.

Usage: python bench/bench_first_frame.py [--runs 12] [--size 100x30]
       [--vllmstat /tmp/vllmstat-venv/bin/vllmstat] [--baseline] [--also NAME=DIR]
       [--python /tmp/llmtop-venv/bin/python]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
TIMEOUT_S = 30.0
BASELINE_APP = '''
import sys, httpx, re
from textual.app import App, ComposeResult
from textual.widgets import Static

class Baseline(App[None]):
    """The least a Textual monitor does: one scrape, one figure on screen."""
    def compose(self) -> ComposeResult:
        yield Static("waiting", id="kv")
    async def on_mount(self) -> None:
        async with httpx.AsyncClient() as c:
            text = (await c.get(sys.argv[1] + "/metrics")).text
        blocks = re.search(r'num_gpu_blocks="(\\d+)"', text)
        size = re.search(r'block_size="(\\d+)"', text)
        n = int(blocks.group(1)) * int(size.group(1)) if blocks and size else 0
        self.query_one("#kv", Static).update(f"capacity {n / 1000:.1f}k tok")

Baseline().run()
'''


@dataclass(frozen=True)
class Monitor:
    name: str
    command: list[str]
    pythonpath: str = str(ROOT)


@dataclass(frozen=True)
class Run:
    first_frame_s: float
    cpu_s: float


def tmux(socket: str, *args: str, env: dict[str, str] | None = None) -> str:
    """tmux on a private server: nobody else's sessions can clash with ours; the server (so
    the pane) gets `env`."""
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=True, env=env
    ).stdout


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def one_run(m: Monitor, figure: str, size: tuple[int, int], env: dict[str, str]) -> Run:
    """Launch `m` in a fresh pane; the seconds until `figure` is on screen, and its CPU then."""
    socket = f"llmtop-ff-{os.getpid()}-{time.monotonic_ns()}"
    cmd = f"exec env PYTHONPATH={m.pythonpath} " + " ".join(m.command)
    t0 = time.monotonic()
    size_args = ("-x", str(size[0]), "-y", str(size[1]))
    # started in / : `python -m` puts the working directory first on sys.path, ahead of
    # PYTHONPATH, which would run this checkout's llmtop for --also's as well
    tmux(socket, "new-session", "-d", "-s", "b", "-c", "/", *size_args, cmd, env=env)
    try:
        pid = int(tmux(socket, "list-panes", "-t", "b", "-F", "#{pane_pid}").split()[0])
        while time.monotonic() - t0 < TIMEOUT_S:
            if figure in tmux(socket, "capture-pane", "-p", "-t", "b"):
                return Run(time.monotonic() - t0, cpu_seconds(pid))
            time.sleep(0.01)
        screen = tmux(socket, "capture-pane", "-p", "-t", "b")
        raise SystemExit(f"{m.name} showed no {figure!r} within {TIMEOUT_S:g} s:\n{screen}")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def import_s(python: str, module: str, runs: int, env: dict[str, str]) -> float:
    """Median wall seconds of `python -c 'import module'` in a fresh interpreter."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", f"import {module}"], env=env, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def importtime_top(python: str, env: dict[str, str], n: int = 8) -> list[tuple[str, float]]:
    """The slowest top-level packages `import llmtop.tui.app` pulls in (cumulative ms)."""
    done = subprocess.run(
        [python, "-X", "importtime", "-c", "import llmtop.tui.app"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = []
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)", line)
        if found and len(found.group(2)) == 2:  # what llmtop.tui.app imports itself
            rows.append((found.group(3), int(found.group(1)) / 1000))
    return sorted(rows, key=lambda r: -r[1])[:n]


def start_sim(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """`llmtop sim` on a free port: the process, its URL and its KV capacity as shown."""
    with log.open("wb") as out:
        sim = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "sim", "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        found = re.search(r"\(([\d,]+) KV tokens.*on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            tokens = int(found.group(1).replace(",", ""))
            return sim, found.group(2), f"{tokens / 1000:.1f}k"
        time.sleep(0.05)
    os.killpg(sim.pid, signal.SIGTERM)
    raise SystemExit(f"the sim did not start: {log.read_text()}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=12, help="runs of each monitor (default 12)")
    ap.add_argument("--size", default="100x30", help="terminal WxH (default 100x30)")
    ap.add_argument("--vllmstat", default="/tmp/vllmstat-venv/bin/vllmstat")
    ap.add_argument("--baseline", action="store_true", help="a minimal Textual app as the peer")
    ap.add_argument("--also", metavar="NAME=DIR", help="another checkout's llmtop, as well")
    ap.add_argument("--python", metavar="PY", help="run llmtop as PY -m llmtop")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    size = tuple(int(x) for x in args.size.split("x"))
    assert len(size) == 2
    tmp = Path(tempfile.mkdtemp(prefix="llmtop-ff-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMTOP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode
    env["PYTHONPATH"] = str(ROOT)  # this checkout's llmtop, not an installed one
    env["XDG_CONFIG_HOME"] = str(tmp)  # no config file of the user's
    sim, url, figure = start_sim(env, tmp / "sim.log")
    try:
        llmtop = shutil.which("llmtop")
        ours = (
            [llmtop]
            if llmtop and not args.python
            else [args.python or sys.executable, "-m", "llmtop"]
        )
        mons = [Monitor("llmtop", [*ours, "--vllm", url, "--gateway", "off"])]
        if args.also:
            name, _, other = args.also.partition("=")
            mons.append(Monitor(name, mons[0].command, str(Path(other).resolve())))
        peer_python = str(Path(args.vllmstat).parent / "python")
        if not args.baseline and Path(args.vllmstat).exists():
            mons.append(Monitor("vllmstat", [args.vllmstat, "-u", url]))  # GPUs probed, as ours
        else:
            script = tmp / "baseline.py"
            script.write_text(BASELINE_APP)
            mons.append(Monitor("textual baseline", [sys.executable, str(script), url]))
        runs: dict[str, list[Run]] = {m.name: [] for m in mons}
        for m in mons:  # untimed: bytecode written, files in the page cache
            one_run(m, figure, size, env)
        for i in range(args.runs):  # alternating: A B, then B A, so neither always goes first
            for m in mons if i % 2 == 0 else mons[::-1]:
                runs[m.name].append(one_run(m, figure, size, env))
        report(mons, runs, args, url, figure, env, peer_python)
    finally:
        os.killpg(sim.pid, signal.SIGTERM)
        sim.wait(10)
    return 0


def report(
    mons: list[Monitor],
    runs: dict[str, list[Run]],
    args: argparse.Namespace,
    url: str,
    figure: str,
    env: dict[str, str],
    peer_python: str,
) -> None:
    print("## First frame with a figure (bench/bench_first_frame.py)\n")
    print(
        f"Each monitor in tmux ({args.size}) launched against the same `llmtop sim` ({url}), "
        f"{args.runs} alternating runs each, {os.cpu_count()} CPUs; the time from launch until "
        f"the sim's KV capacity ({figure}) is on screen. Median (min-max); the ratio is of the "
        "medians.\n"
    )
    print("| monitor | first frame, wall | CPU to it | x llmtop |")
    print("|---|---|---|---|")
    base = statistics.median(r.first_frame_s for r in runs[mons[0].name])
    for m in mons:
        wall = [r.first_frame_s for r in runs[m.name]]
        cpu = [r.cpu_s for r in runs[m.name]]
        w = statistics.median(wall)
        print(
            f"| {m.name} | {w:.3f} s ({min(wall):.3f}-{max(wall):.3f}) | "
            f"{statistics.median(cpu):.2f} s | {w / base:.2f} |"
        )
    print()
    for m in mons:
        where = "" if m.pythonpath == str(ROOT) else f" (PYTHONPATH={m.pythonpath})"
        print(f"- `{m.name}`: `{' '.join(m.command)}`{where}")
    python = args.python or sys.executable
    imports = [(python, "textual.app"), (python, "llmtop.tui.app")]
    if Path(peer_python).exists():
        imports.append((peer_python, "vllmstat.app"))
    print("\nImports alone, a fresh interpreter each, median of 7:\n")
    for python, module in imports:
        print(f"- `import {module}`: {import_s(python, module, 7, env):.3f} s")
    top = ", ".join(f"{name} {ms:.0f} ms" for name, ms in importtime_top(python, env))
    print(f"\n`python -X importtime -c 'import llmtop.tui.app'`, the slowest packages: {top}.")
    print(f"\nLoad average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end.")


if __name__ == "__main__":
    sys.exit(main())
