"""The sim's cost: how fast virtual time runs, and what the real server spends per stream.

1. Virtual time (the engine alone, what what-if analysis uses): the seed profile with 64
   concurrent closed-loop streams (512-token prompts, 256 output tokens), simulated seconds per
   CPU second (median of several runs), and the CPU cost of 10 simulated minutes.
2. The server (`llmtop sim --profile fast` in its own process) under N concurrent streams over
   127.0.0.1: its CPU share (from /proc, Linux only) and the tokens it delivered per second.

    python bench/bench_sim.py            # prints a markdown section
    python bench/bench_sim.py --quick    # fewer runs, shorter server phases
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from harness.sim_virtual import run_concurrent  # noqa: E402
from llmtop.sim.model import Engine, EngineConfig  # noqa: E402
from llmtop.sim.profiles import get_profile  # noqa: E402


def virtual_run(sim_seconds: float) -> tuple[float, int, int]:
    """CPU seconds, steps and tokens of `sim_seconds` of 64 streams on the seed profile."""
    engine = Engine(EngineConfig.from_profile(get_profile("seed")))
    start = time.process_time()
    steps = run_concurrent(engine, 64, 512, 256, sim_seconds)
    return time.process_time() - start, steps, engine.stats.generation_tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(url: str, streams: int, seconds: float) -> int:
    """Closed-loop streaming clients for `seconds`; returns SSE token chunks received."""
    received = 0
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=streams + 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def one() -> None:
            nonlocal received
            while time.monotonic() < stop:
                body = {"prompt": [1] * 128, "max_tokens": 64, "stream": True}
                async with client.stream("POST", "/v1/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            received += 1

        await asyncio.gather(*(one() for _ in range(streams)))
    return received


def server_phase(streams: int, seconds: float) -> tuple[float, float]:
    """(server CPU share of one core, tokens per second) under `streams` concurrent streams."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "sim", "--profile", "fast", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        tokens = asyncio.run(drive(url, streams, seconds))
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
        return (cpu1 - cpu0) / (t1 - t0), tokens / (t1 - t0)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 3 if args.quick else 7
    rates = []
    for _ in range(runs):
        cpu, _, _ = virtual_run(60.0)
        rates.append(60.0 / cpu)
    ten = [virtual_run(600.0) for _ in range(3 if not args.quick else 1)]
    ten_cpu = statistics.median(c for c, _, _ in ten)
    _, ten_steps, ten_tokens = ten[0]
    print("## Simulated engine (bench/bench_sim.py)\n")
    print("Virtual time, seed profile, 64 concurrent streams (512-token prompts, 256 out):\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| simulated s per CPU s (median of {runs}) | {statistics.median(rates):,.0f} |")
    print(f"| range over runs | {min(rates):,.0f} .. {max(rates):,.0f} |")
    print(f"| CPU for 10 simulated minutes (median) | {ten_cpu:.3f} s |")
    print(f"| engine steps in 10 simulated minutes | {ten_steps:,} |")
    print(f"| CPU per step | {1e6 * ten_cpu / ten_steps:.1f} us |")
    print(f"| tokens generated in 10 simulated minutes | {ten_tokens:,} |")
    if not Path("/proc/self/stat").exists():
        return
    seconds = 3.0 if args.quick else 8.0
    print("\nServer (`llmtop sim --profile fast`, own process), closed-loop streams over")
    print("127.0.0.1 (128-token prompts, 64 out); CPU is the server process only:\n")
    print("| streams | server CPU (of one core) | tokens delivered/s | CPU per 1k tokens |")
    print("|---|---|---|---|")
    for streams in (64, 256):
        share, tok_s = server_phase(streams, seconds)
        per_k = 1000 * share / tok_s if tok_s else float("nan")
        print(f"| {streams} | {share:.0%} | {tok_s:,.0f} | {1000 * per_k:.0f} ms |")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nLoad average during the run: {load:.1f} on {os.cpu_count()} CPUs (the client")
    print("shares them: tokens/s is bounded by the client and the box, not the server).")


if __name__ == "__main__":
    main()
