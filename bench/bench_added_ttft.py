"""The TTFT one gateway adds while it relays many concurrent streams, each at a modest rate.

Four processes on 127.0.0.1, so no two share an event loop: the instant upstream of
bench_relay.py (its chunks `gap_ms` apart), one `llmtop gateway` (this tree), a stream client
holding S streams open through the gateway (each a chunk every `--gap-ms`: S x 1000 / gap
chunks a second relayed), and this process, which sends probes once all S streams have had
their first chunk: one straight to the upstream, one through the gateway, in turn, each on its
own kept-alive connection, timed to its first chunk. The streams' starts are spread over one
gap, so their chunks come evenly, as independent clients' would (`--together` opens them at
once: then all S chunks come in one burst each gap). The difference of the two sides'
percentiles is what the gateway adds; the gateway's CPU over the probe phase is printed beside
it, so a saturated box shows as such.

    python bench/bench_added_ttft.py                       # 1,000 streams at 2 tok/s, 3 runs
    python bench/bench_added_ttft.py --streams 0 1000 --runs 3 --probes 500
    python bench/bench_added_ttft.py --profile out.prof    # cProfile of the gateway, 1 run

Loopback only; bounded: each phase has a count and a deadline (120 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_relay import BODY, Gateway, _serve_upstream, pct

DEADLINE_S = 120.0
TREE = Path(__file__).resolve().parent.parent


def _hold_streams(
    url: str, streams: int, gap_ms: float, together: bool, ready: Any, stop: Any
) -> None:
    """In its own process: `streams` streams open through `url`, each read to the end; `ready`
    gets the count once all have had a first chunk; returns when `stop` is set."""

    async def run() -> None:
        started = 0
        all_started = asyncio.Event()
        target = f"{url}/v1/completions?chunks=100000&gap_ms={gap_ms:g}"

        async def one(s: aiohttp.ClientSession, i: int) -> None:
            nonlocal started
            if not together:
                await asyncio.sleep(i * gap_ms / 1000 / streams)  # phases spread over one gap
            async with s.post(target, data=BODY) as r:
                assert r.status == 200, r.status
                first = True
                async for _ in r.content.iter_any():
                    if first:
                        started += 1
                        first = False
                        if started == streams:
                            all_started.set()

        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as s:
            tasks = [asyncio.ensure_future(one(s, i)) for i in range(streams)]
            with contextlib.suppress(TimeoutError):  # the count says how many opened
                await asyncio.wait_for(all_started.wait(), DEADLINE_S)
            ready.put(started)
            await asyncio.to_thread(stop.wait, DEADLINE_S * 10)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())


async def probe(s: aiohttp.ClientSession, url: str, handler: list[float] | None = None) -> float:
    """Seconds from sending one streamed request to its first chunk; the gateway's own time to
    the answer's head (its `x-llmtop-handler-to-headers-ms`, seconds) appended to `handler`."""
    t0 = time.perf_counter()
    async with s.post(f"{url}/v1/completions?chunks=1&gap_ms=0", data=BODY) as r:
        assert r.status == 200, r.status
        async for _ in r.content.iter_any():
            took = time.perf_counter() - t0
            break
        await r.read()
    if handler is not None:
        handler.append(float(r.headers["x-llmtop-handler-to-headers-ms"]) / 1000)
    return took


async def probes(upstream: str, gateway: str, n: int) -> dict[str, list[float]]:
    """n probes each way, alternating, after 20 each way to warm both connections."""
    out: dict[str, list[float]] = {"direct": [], "gw": [], "handler": []}
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as direct,
        aiohttp.ClientSession(timeout=timeout) as through,
    ):
        for _ in range(20):
            await probe(direct, upstream)
            await probe(through, gateway)
        deadline = time.monotonic() + DEADLINE_S
        for _ in range(n):
            out["direct"].append(await probe(direct, upstream))
            out["gw"].append(await probe(through, gateway, out["handler"]))
            if time.monotonic() > deadline:
                break
    return out


async def one_run(
    gw: Gateway, upstream: str, streams: int, gap_ms: float, n: int, together: bool
) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    holder = None
    if streams:
        holder = ctx.Process(
            target=_hold_streams, args=(gw.url, streams, gap_ms, together, ready, stop)
        )
        holder.start()
        opened = await asyncio.to_thread(ready.get, True, DEADLINE_S + 30)
        assert opened == streams, f"{opened} of {streams} streams opened"
    try:
        c0, t0 = gw.cpu_s(), time.monotonic()
        got = await probes(upstream, gw.url, n)
        cpu = (gw.cpu_s() - c0) / (time.monotonic() - t0)
    finally:
        stop.set()
        if holder is not None:
            holder.join(30)
            if holder.is_alive():
                holder.terminate()
    out = {
        f"{k}_{q}": pct(v, p) * 1e3
        for k, v in got.items()
        for q, p in (("p50", 0.5), ("p99", 0.99))
    }
    out["gateway_cpu"] = cpu
    out["probes"] = float(len(got["gw"]))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[1000], help="streams held open")
    ap.add_argument("--gap-ms", type=float, default=500.0, help="between a stream's chunks")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--probes", type=int, default=500, help="each way, per run")
    ap.add_argument("--together", action="store_true", help="open the streams at once")
    ap.add_argument("--profile", type=Path, help="run the gateway under cProfile, to this file")
    a = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # children inherit it
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    q = mp.get_context("spawn").Queue()
    up = mp.get_context("spawn").Process(target=_serve_upstream, args=(q,), daemon=True)
    up.start()
    upstream = q.get(timeout=60)
    gw = Gateway(TREE, upstream, profile=a.profile)
    rows: dict[int, list[dict[str, float]]] = {s: [] for s in a.streams}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        for _ in range(a.runs):
            for s in a.streams:
                rows[s].append(await one_run(gw, upstream, s, a.gap_ms, a.probes, a.together))
    finally:
        gw.stop()
        up.kill()  # the upstream holds nothing worth a graceful stop
        up.join(10)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"| streams (a chunk each {a.gap_ms:g} ms) | chunks/s relayed | direct p50 / p99 ms "
        f"| through the gateway p50 / p99 ms | added p50 / p99 ms (median of {a.runs}) "
        "| added p99 of each run | the gateway's own time to the head p50 / p99 ms "
        "| gateway CPU (cores) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        each = ", ".join(f"{r['gw_p99'] - r['direct_p99']:.2f}" for r in runs)
        print(
            f"| {s:,} | {s * 1000 / a.gap_ms:,.0f} | {med['direct_p50']:.2f} / "
            f"{med['direct_p99']:.2f} | {med['gw_p50']:.2f} / {med['gw_p99']:.2f} "
            f"| {statistics.median(r['gw_p50'] - r['direct_p50'] for r in runs):.2f} / "
            f"{statistics.median(r['gw_p99'] - r['direct_p99'] for r in runs):.2f} "
            f"| {each} | {med['handler_p50']:.2f} / {med['handler_p99']:.2f} "
            f"| {med['gateway_cpu']:.2f} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
