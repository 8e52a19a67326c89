"""CPU cost of watching a fleet: 100 replicas scraped directly at 1 Hz, and through Prometheus.

Targets: bench/fleet_targets.py serves the real vLLM 0.32 capture (53 KB, counters advancing,
no two replicas alike; with --gzip compressed for a client that accepts it, as
prometheus_client's make_asgi_app does, though vLLM 0.32's /metrics does not) on N ports from
another process. "direct": a FleetCollector scrapes all N each second (aiohttp,
filtered parse, per-replica derive and rules, fleet rules). "prometheus": a real Prometheus
(Debian's package) scrapes the same N every second and a FleetCollector reads them all through
PromQL. Figure: CPU seconds of this process per poll (time.process_time around poll(), a poll a
second, so it is the share of one core), median over the polls after warm-up, and their mean
(which counts the garbage collector's occasional full passes); and of that, the
CPU inside the fleet pipeline (per-replica derive and rules, fleet rules), the rest being reading;
and the wall time of a poll (median: how long Prometheus takes to answer, for that source).

    python bench/bench_fleet.py [--replicas 100] [--polls 30] [--mode direct|prometheus|both]
                                [--gzip]
    python bench/bench_fleet.py --mode clients   # the HTTP GET alone, two clients side by side

"direct" is measured twice a round, full scrapes then narrow ones (llmtop/core/narrow.py: the
targets, as vLLM, answer /metrics/?name[]=... with only the series named), `--rounds` rounds;
with --no-name-filter the targets have no such answer (an exporter without prometheus_client's
mount) and llmtop, finding so, scrapes them in full both times.

"clients": each second, the N bodies are read once over an aiohttp session (as the fleet read
them before llmtop/sources/lean_http.py) and once over the lean client, alternating in the same
process; CPU per round of N GETs, median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.fleet import FleetCollector

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_file(path: Path, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while not path.exists():
        if time.monotonic() > end:
            raise SystemExit(f"{path} did not appear within {deadline_s} s")
        time.sleep(0.1)


def wait_ready(url: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} not ready within {deadline_s} s")


async def measure(monitor: MonitorSettings, polls: int, warmup: int) -> dict[str, float]:
    """Poll once a second; CPU per poll (median, p90) after warm-up, of which the fleet
    pipeline's (derive, rules), replicas seen up."""
    collector = FleetCollector(monitor, HealthSettings(), timeout_s=0.9)
    scraper = collector._scraper
    cpu: list[float] = []
    queries: list[int] = []
    in_pipeline: list[float] = []
    wall: list[float] = []
    update = collector.pipeline.update

    def timed_update(*args: Any) -> Any:
        c = time.process_time()
        try:
            return update(*args)
        finally:
            in_pipeline.append(time.process_time() - c)

    collector.pipeline.update = timed_update  # type: ignore[method-assign]
    up = 0
    try:
        for i in range(polls + warmup):
            start = time.monotonic()
            sent = collector.prometheus.queries_sent if collector.prometheus else 0
            c0 = time.process_time()
            await collector.poll()
            spent = time.process_time() - c0
            took = time.monotonic() - start
            if i < warmup:
                in_pipeline.clear()
            else:
                cpu.append(spent)
                wall.append(took)
                if collector.prometheus is not None:
                    queries.append(collector.prometheus.queries_sent - sent)
            assert collector.fleet is not None
            up = collector.fleet.totals.up
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    finally:
        await collector.aclose()
    cpu.sort()
    return {
        "median": statistics.median(cpu),
        "mean": statistics.fmean(cpu),
        "p90": cpu[int(0.9 * (len(cpu) - 1))],
        "up": float(up),
        "queries": statistics.median(queries) if queries else float("nan"),
        "pipeline": statistics.median(in_pipeline),
        "wall": statistics.median(wall),
        "narrow": float(sum(scraper.narrow_url(u) is not None for u in monitor.vllm_urls)),
    }


async def measure_clients(urls: tuple[str, ...], polls: int, warmup: int) -> dict[str, float]:
    """CPU of N GETs a second over aiohttp and over the lean client, alternating; medians."""
    import aiohttp

    from llmtop.sources.lean_http import LeanClient

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        headers={"Accept-Encoding": "identity"},
    )
    lean = LeanClient(timeout_s=0.9, max_bytes=64 << 20)

    async def over_aiohttp(url: str) -> bytes:
        async with session.get(url) as resp:
            return await resp.read()

    async def over_lean(url: str) -> bytes:
        return (await lean.get(url)).body

    spent: dict[str, list[float]] = {"aiohttp": [], "lean": []}
    try:
        for i in range(polls + warmup):
            start = time.monotonic()
            for name, get in (("aiohttp", over_aiohttp), ("lean", over_lean)):
                c = time.process_time()
                bodies = await asyncio.gather(*(get(u + "/metrics") for u in urls))
                took = time.process_time() - c
                assert all(len(b) > 1000 for b in bodies)
                if i >= warmup:
                    spent[name].append(took)
                await asyncio.sleep(0.2)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    finally:
        await session.close()
        lean.close()
    return {name: statistics.median(v) for name, v in spent.items()}


def pin(wanted: bool) -> list[str]:
    """Keep this process on one core and the others (targets, Prometheus) off it; the command
    prefix that starts a process on the other cores ([] when not pinned).

    Unpinned on this 2-core VM the same tree measured 85 or 120 ms a poll from one run to the
    next, as the scheduler put the targets' process on llmtop's core or not (sharing a core's
    caches with the process serving 5 MB a second). Pinned, the figure is llmtop's own work, as
    when it watches replicas on other machines."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    taskset = shutil.which("taskset")
    if not wanted or len(cpus) < 2 or taskset is None:
        return []
    os.sched_setaffinity(0, {cpus[0]})
    return [taskset, "-c", ",".join(str(c) for c in cpus[1:])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=100)
    ap.add_argument("--polls", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mode", choices=("direct", "prometheus", "both", "clients"), default="both")
    ap.add_argument("--gzip", action="store_true", help="targets gzip when the client asks")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="leave CPU placement to the scheduler (default: llmtop on one core, the targets "
        "and Prometheus on the others)",
    )
    ap.add_argument("--uvloop", action="store_true", help="run llmtop's side on uvloop's loop")
    ap.add_argument("--rounds", type=int, default=1, help="direct: rounds of (full, narrow)")
    ap.add_argument(
        "--no-name-filter",
        action="store_true",
        help="targets without /metrics/?name[]= (every scrape then a full one)",
    )
    args = ap.parse_args()
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    pinned = pin(not args.no_pin)
    procs: list[subprocess.Popen[bytes]] = []
    results: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        ports_file = tmpdir / "ports.txt"
        try:
            procs.append(
                subprocess.Popen(
                    [
                        *pinned,
                        sys.executable,
                        str(HERE / "fleet_targets.py"),
                        "--replicas",
                        str(args.replicas),
                        "--ports-file",
                        str(ports_file),
                        *(["--gzip"] if args.gzip else []),
                        *(["--no-name-filter"] if args.no_name_filter else []),
                    ]
                )
            )
            wait_file(ports_file, 30)
            ports = ports_file.read_text().split()
            urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
            if args.mode == "clients":
                got = asyncio.run(measure_clients(urls, args.polls, args.warmup))
                n = len(urls)
                print(f"## The GET alone: CPU of {n} GETs a second, median of {args.polls}\n")
                print("| client | CPU per round | per GET | vs aiohttp |\n|---|---:|---:|---:|")
                for name, v in got.items():
                    print(
                        f"| {name} | {v * 1000:.1f} ms | {v / n * 1e6:.0f} us "
                        f"| {v / got['aiohttp']:.2f}x |"
                    )
                return
            if args.mode in ("direct", "both"):
                for _ in range(args.rounds):
                    for narrow in (False, True):
                        monitor = MonitorSettings(
                            vllm_urls=urls, gateway_url=None, nvml=False, narrow_scrape=narrow
                        )
                        results.append(
                            (
                                f"direct, {'narrow' if narrow else 'full'} scrapes",
                                asyncio.run(measure(monitor, args.polls, args.warmup)),
                            )
                        )
            if args.mode in ("prometheus", "both"):
                binary = shutil.which("prometheus")
                if binary is None:
                    raise SystemExit("no prometheus binary (apt-get install prometheus)")
                port = free_port()
                targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
                (tmpdir / "prometheus.yml").write_text(
                    "global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
                    f"      - targets: [{targets}]\n"
                )
                procs.append(
                    subprocess.Popen(
                        [
                            *pinned,
                            binary,
                            f"--config.file={tmpdir / 'prometheus.yml'}",
                            f"--storage.tsdb.path={tmpdir / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{port}",
                        ],
                        stderr=subprocess.DEVNULL,
                    )
                )
                wait_ready(f"http://127.0.0.1:{port}/-/ready", 60)
                time.sleep(15)  # a window of data
                monitor = MonitorSettings(
                    vllm_urls=(),
                    gateway_url=None,
                    nvml=False,
                    prometheus_url=f"http://127.0.0.1:{port}",
                    prometheus_selector='{job="vllm"}',
                    prometheus_window_s=10.0,
                )
                results.append(
                    ("prometheus", asyncio.run(measure(monitor, args.polls, args.warmup)))
                )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    print(f"## Fleet: CPU of the llmtop process at 1 Hz, {args.replicas} replicas\n")
    print(
        f"Median (p90) of {args.polls} polls after {args.warmup} of warm-up; targets "
        f"{'gzip when asked' if args.gzip else 'answer plain text'}"
        f"{', no ?name[]= answer' if args.no_name_filter else ''}; "
        f"{'llmtop pinned to one core, the rest to the others' if pinned else 'not pinned'}"
        f"{'; on uvloop' if args.uvloop else ''}.\n"
    )
    print(
        "| source | replicas up | scraped narrow | queries a poll | wall per poll "
        "| CPU per poll (median) | p90 | mean | of which the pipeline (median) "
        "| share of one core (median; mean) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results:
        queries = "-" if r["queries"] != r["queries"] else f"{r['queries']:g}"  # NaN: direct
        print(
            f"| {name} | {r['up']:.0f} | {r['narrow']:.0f} | {queries} "
            f"| {r['wall'] * 1000:.0f} ms "
            f"| {r['median'] * 1000:.1f} ms "
            f"| {r['p90'] * 1000:.1f} ms | {r['mean'] * 1000:.1f} ms "
            f"| {r['pipeline'] * 1000:.1f} ms "
            f"| {r['median'] * 100:.1f}%; {r['mean'] * 100:.1f}% |"
        )


if __name__ == "__main__":
    main()
