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

"direct" is measured twice a round, full scrapes then narrow ones
(llmtop/core/exposition/narrow.py: the targets, as vLLM, answer /metrics/?name[]=... with only
the series named), `--rounds` rounds;
with --no-name-filter the targets have no such answer (an exporter without prometheus_client's
mount) and llmtop, finding so, scrapes them in full both times.

"clients": each second, the N bodies are read once over the fleet's client
(llmtop/sources/http/scrape_client.py, aiohttp) and once over httpx (the monitor's
`http_client`), alternating in the same process; CPU per round of N GETs, median; `--narrow`
reads the narrow answer (/metrics/?name[]=...) instead of the full one.

`--against PATH` (a checkout of another commit, say `git worktree add ../base REV`): both
trees at once, each in its own process on llmtop's core, polling half a second apart (their
turns swapped each round), so that both see the same minutes of this shared box, whose speed
moves by up to 1.7x between runs minutes apart; the figure is the median ratio of the two
polls made in the same second.

    python bench/bench_fleet.py --mode prometheus --against ../base --rounds 3 --polls 60
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.http_ready import wait_ready
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.fleet_collector import FleetCollector

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


async def measure(
    monitor: MonitorSettings,
    polls: int,
    warmup: int,
    phase: float | None = None,
    timeout_s: float = 0.9,
) -> dict[str, Any]:
    """Poll once a second; CPU per poll (median, p90) after warm-up, of which the fleet
    pipeline's (derive, rules), replicas seen up. `phase`: poll at that fraction of each wall-
    clock second (two processes measured side by side then take turns)."""
    gen0, *older = gc.get_threshold()  # as `llmtop top` sets it (llmtop.cli.tune_gc)
    gc.set_threshold(max(gen0, 10_000), *older)
    collector = FleetCollector(monitor, HealthSettings(), timeout_s=timeout_s)
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
            if phase is None:
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
            else:
                now = time.time()
                await asyncio.sleep(math.floor(now - phase) + 1 + phase - now)
    finally:
        await collector.aclose()
    cpu_in_order = list(cpu)
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
        "polls": cpu_in_order,
    }


async def measure_clients(
    urls: tuple[str, ...], polls: int, warmup: int, narrow: bool
) -> dict[str, float]:
    """CPU of N GETs a second over the fleet's aiohttp client and over httpx, alternating."""
    from llmtop.core.exposition.narrow import query
    from llmtop.sources.http.clients import http_client
    from llmtop.sources.http.scrape_client import ScrapeClient
    from llmtop.sources.vllm import VLLM_KEEP

    path = f"/metrics/?{query(VLLM_KEEP.names)}" if narrow else "/metrics"
    fleet = ScrapeClient(timeout_s=0.9, max_bytes=64 << 20)
    httpx_client = http_client(0.9)

    async def over_aiohttp(url: str) -> bytes:
        return (await fleet.get(url)).body

    async def over_httpx(url: str) -> bytes:
        return (await httpx_client.get(url, headers={"Accept-Encoding": "identity"})).content

    clients = (("aiohttp", over_aiohttp), ("httpx", over_httpx))
    spent: dict[str, list[float]] = {name: [] for name, _ in clients}
    try:
        for i in range(polls + warmup):
            start = time.monotonic()
            for name, get in clients if i % 2 else clients[::-1]:
                c = time.process_time()
                bodies = await asyncio.gather(*(get(u + path) for u in urls))
                took = time.process_time() - c
                assert all(len(b) > 1000 for b in bodies)
                if i >= warmup:
                    spent[name].append(took)
                await asyncio.sleep(0.2)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    finally:
        await fleet.aclose()
        await httpx_client.aclose()
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


def monitor_of(spec: str) -> MonitorSettings:
    """The settings a source spec names: `direct:full|narrow:PORTS_FILE` or `prometheus:URL`."""
    kind, _, rest = spec.partition(":")
    if kind == "prometheus":
        return MonitorSettings(
            vllm_urls=(),
            gateway_url=None,
            nvml=False,
            prometheus_url=rest,
            prometheus_selector='{job="vllm"}',
            prometheus_window_s=10.0,
        )
    scrapes, _, ports_file = rest.partition(":")
    urls = tuple(f"http://127.0.0.1:{p}" for p in Path(ports_file).read_text().split())
    narrow: dict[str, Any] = {"narrow_scrape": scrapes == "narrow"}
    if "narrow_scrape" not in MonitorSettings.__dataclass_fields__:  # a tree from before it
        narrow = {}
    return MonitorSettings(vllm_urls=urls, gateway_url=None, nvml=False, **narrow)


def side_by_side(
    spec: str, args: argparse.Namespace
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """This tree and `--against`'s measuring `spec` at once, half a second apart, each round:
    (this tree's figures, the other's)."""
    trees = (str(HERE.parent), str(Path(args.against).resolve()))
    out = []
    for r in range(args.rounds):
        procs = []
        for i, tree in enumerate(trees):
            phase = 0.25 + 0.5 * ((i + r) % 2)
            cmd = [sys.executable, str(HERE / "bench_fleet.py"), "--worker", spec]
            cmd += ["--phase", str(phase), "--polls", str(args.polls), "--warmup", str(args.warmup)]
            cmd += ["--timeout", str(args.timeout)]
            env = dict(os.environ, PYTHONPATH=tree)
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
        got = []
        for p in procs:
            stdout, _ = p.communicate()
            if p.returncode:
                raise SystemExit(f"a side-by-side worker failed (exit {p.returncode})")
            got.append(json.loads(stdout.strip().splitlines()[-1]))
        out.append((got[0], got[1]))
    return out


def print_pairs(
    pairs: list[tuple[str, list[tuple[dict[str, Any], dict[str, Any]]]]], args: argparse.Namespace
) -> None:
    """The side-by-side table: each round's medians, then over every pair of polls."""
    other = Path(args.against).name
    print(f"## Fleet side by side: this tree and {other}, {args.replicas} replicas at 1 Hz\n")
    print(
        f"Each round both trees poll at once, half a second apart on the same core, "
        f"{args.polls} polls after {args.warmup} of warm-up; CPU per poll, median (mean); "
        "the ratio is this tree's poll over the other's polled in the same second, median.\n"
    )
    print(f"| source | round | up | this tree | {other} | of which the pipeline | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rounds in pairs:
        mine_all: list[float] = []
        theirs_all: list[float] = []
        for r, (mine, theirs) in enumerate(rounds):
            paired = zip(mine["polls"], theirs["polls"], strict=True)
            ratio = statistics.median(a / b for a, b in paired)
            mine_all += mine["polls"]
            theirs_all += theirs["polls"]
            print(
                f"| {name} | {r + 1} | {mine['up']:.0f} / {theirs['up']:.0f} "
                f"| {mine['median'] * 1000:.1f} ({mine['mean'] * 1000:.1f}) ms "
                f"| {theirs['median'] * 1000:.1f} ({theirs['mean'] * 1000:.1f}) ms "
                f"| {mine['pipeline'] * 1000:.1f} / {theirs['pipeline'] * 1000:.1f} ms "
                f"| {ratio:.3f} |"
            )
        ratio = statistics.median(a / b for a, b in zip(mine_all, theirs_all, strict=True))
        print(
            f"| {name} | all | | {statistics.median(mine_all) * 1000:.1f} "
            f"({statistics.fmean(mine_all) * 1000:.1f}) ms "
            f"| {statistics.median(theirs_all) * 1000:.1f} "
            f"({statistics.fmean(theirs_all) * 1000:.1f}) ms | | **{ratio:.3f}** |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=100)
    ap.add_argument("--polls", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mode", choices=("direct", "prometheus", "both", "clients"), default="both")
    ap.add_argument("--gzip", action="store_true", help="targets gzip when the client asks")
    ap.add_argument("--narrow", action="store_true", help="clients: GET the narrow answer")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="leave CPU placement to the scheduler (default: llmtop on one core, the targets "
        "and Prometheus on the others)",
    )
    ap.add_argument("--uvloop", action="store_true", help="run llmtop's side on uvloop's loop")
    ap.add_argument(
        "--rounds", type=int, default=1, help="direct: rounds of (full, narrow); --against: rounds"
    )
    ap.add_argument(
        "--no-name-filter",
        action="store_true",
        help="targets without /metrics/?name[]= (every scrape then a full one)",
    )
    ap.add_argument(
        "--against",
        metavar="PATH",
        help="a checkout of another commit (a git worktree): its llmtop is measured at the same "
        "time as this tree's, each in its own process on llmtop's core, polling half a second "
        "apart, --rounds rounds (their turns swapped each round); the ratio of paired polls",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=0.9,
        help="seconds each read may take (0.9; a Prometheus on a busy box may need more)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # a source spec: one tree, JSON out
    ap.add_argument("--phase", type=float, default=0.25, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        pin(True)
        got = asyncio.run(
            measure(monitor_of(args.worker), args.polls, args.warmup, args.phase, args.timeout)
        )
        print(json.dumps(got))
        return
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    pinned = pin(not args.no_pin)
    procs: list[subprocess.Popen[bytes]] = []
    results: list[tuple[str, dict[str, Any]]] = []
    pairs: list[tuple[str, list[tuple[dict[str, Any], dict[str, Any]]]]] = []
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
                got = asyncio.run(measure_clients(urls, args.polls, args.warmup, args.narrow))
                n = len(urls)
                print(f"## The GET alone: CPU of {n} GETs a second, median of {args.polls}\n")
                print("| client | CPU per round | per GET | vs aiohttp |\n|---|---:|---:|---:|")
                for name, v in got.items():
                    ratio = v / got["aiohttp"]
                    print(f"| {name} | {v * 1000:.1f} ms | {v / n * 1e6:.0f} us | {ratio:.2f}x |")
                return
            if args.mode in ("direct", "both") and args.against:
                for kind in ("full", "narrow"):
                    spec = f"direct:{kind}:{ports_file}"
                    pairs.append((f"direct, {kind} scrapes", side_by_side(spec, args)))
            elif args.mode in ("direct", "both"):
                for _ in range(args.rounds):
                    for narrow in (False, True):
                        kind = "narrow" if narrow else "full"
                        monitor = monitor_of(f"direct:{kind}:{ports_file}")
                        results.append(
                            (
                                f"direct, {kind} scrapes",
                                asyncio.run(
                                    measure(monitor, args.polls, args.warmup, None, args.timeout)
                                ),
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
                spec = f"prometheus:http://127.0.0.1:{port}"
                if args.against:
                    pairs.append(("prometheus", side_by_side(spec, args)))
                else:
                    monitor = monitor_of(spec)
                    results.append(
                        (
                            "prometheus",
                            asyncio.run(
                                measure(monitor, args.polls, args.warmup, None, args.timeout)
                            ),
                        )
                    )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    if args.against:
        print_pairs(pairs, args)
        return
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
