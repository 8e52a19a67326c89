#!/usr/bin/env python3
"""CPU cost of the TUI at a 1 s refresh, and time to first frame; prints a markdown section.

The real `llmtop` runs in tmux (a real terminal, so rendering and terminal writes count) against
a static server answering the real 53 KB vLLM /metrics (tests/fixtures/metrics-load.txt) and a
real llmtop gateway, both in another process so their CPU is not counted. CPU is read from
/proc/<pid>/stat (utime + stime) over a window after a warm-up: % of one core.
Usage: python bench/bench_tui.py [--seconds 30] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "metrics-load.txt"
TICK = os.sysconf("SC_CLK_TCK")


def serve(engine_port: int, gateway_port: int) -> None:
    """Child process: the static /metrics and a gateway in front of it."""
    sys.path.insert(0, str(ROOT))
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    from llmtop.asgi.uvicorn_runner import ServerThread
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings

    text = FIXTURE.read_text()

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    engine = ServerThread(Starlette(routes=[Route("/metrics", metrics)]), port=engine_port)
    engine.start()
    gateway = ServerThread(
        create_app(GatewaySettings(upstream=engine.url, max_concurrency=8)), port=gateway_port
    )
    gateway.start()
    print("ready", engine.url, gateway.url, flush=True)
    threading.Event().wait()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def tmux(socket: str, *args: str) -> str:
    """Run tmux on a private server (one per run): nobody else's sessions can clash with ours."""
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=True
    ).stdout


def one_run(
    size: tuple[int, int], urls: tuple[str, str], seconds: float
) -> tuple[float, float, float]:
    """(time to first frame s, CPU s spent until then, % of one core) for one llmtop process."""
    session = f"llmtop-bench-{os.getpid()}"
    socket = f"{session}-{size[0]}x{size[1]}-{time.monotonic_ns()}"
    llmtop = shutil.which("llmtop") or f"{sys.executable} -m llmtop"
    cmd = f"exec {llmtop} --vllm {urls[0]} --gateway {urls[1]} --interval-s 1"
    t0 = time.monotonic()
    tmux(socket, "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), cmd)
    try:
        pid = int(tmux(socket, "list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        first = None
        while time.monotonic() - t0 < 30:
            if "tinyllm" in tmux(socket, "capture-pane", "-p", "-t", session):
                first = time.monotonic() - t0
                first_cpu = cpu_seconds(pid)
                break
            time.sleep(0.02)
        if first is None:
            raise SystemExit("llmtop showed no data within 30 s")
        time.sleep(5)  # warm-up: imports done, history filling
        c0, w0 = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = cpu_seconds(pid), time.monotonic()
        return first, first_cpu, 100.0 * (c1 - c0) / (w1 - w0)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "0", "0"],  # free ports, printed back
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        if len(ready) != 3 or ready[0] != "ready":
            raise SystemExit("the static server did not start")
        urls = (ready[1], ready[2])
        print("## TUI CPU cost at a 1 s refresh\n")
        print(
            f"Real `llmtop` in tmux against the real {FIXTURE.stat().st_size // 1000} KB vLLM "
            f"/metrics and a gateway; {args.runs} runs of {args.seconds:.0f} s after a 5 s "
            f"warm-up, {os.cpu_count()} CPUs. Median (min-max).\n"
        )
        print("| terminal | CPU, % of one core | first frame: wall | first frame: CPU |")
        print("|---|---|---|---|")
        for size in ((80, 24), (100, 30), (200, 50)):
            runs = [one_run(size, urls, args.seconds) for _ in range(args.runs)]
            cpu = [r[2] for r in runs]
            print(
                f"| {size[0]}x{size[1]} | {statistics.median(cpu):.1f}% "
                f"({min(cpu):.1f}-{max(cpu):.1f}) | {statistics.median(r[0] for r in runs):.2f} s "
                f"| {statistics.median(r[1] for r in runs):.2f} s |",
                flush=True,
            )
        print(
            "\nTarget: at most 3% of one core; vllmstat (closest Textual peer) ~4%. The wall time"
            " to the first frame depends on the machine's load (the CPU time to it does not):"
            f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end."
        )
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
