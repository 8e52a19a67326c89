"""The gateway's cost: added latency, 429 decisions per second, memory per queued request.

In one run: an instant upstream (streams four SSE chunks at once) and the gateway each in their
own process on 127.0.0.1; the same client then measures TTFT and E2E direct and through the
gateway, in alternating blocks, at several concurrencies; the difference is what the gateway
adds, printed beside the gateway's own handler time (llmtop/gateway/server/handler_time.py). Then
429s per second with the queue full (over HTTP, and the admission decision alone), and memory
per queued request (the controller alone, and the gateway process over HTTP).

    python bench/bench_gateway.py            # prints a markdown section
    python bench/bench_gateway.py --quick    # fewer requests
    python bench/bench_gateway.py --concurrency 1 --repeat 5 --latency-only   # medians of 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from llmtop.gateway.admission.controller import AdmissionController, Limits, Rejected  # noqa: E402

BODY = b'{"model": "m", "prompt": "hello", "max_tokens": 4, "stream": true}'
CHUNKS = [b'data: {"choices": [{"text": "t%d"}]}\n\n' % i for i in range(4)] + [b"data: [DONE]\n\n"]


async def instant_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An engine that answers at once: four SSE chunks and [DONE], no think time."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    for chunk in CHUNKS:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def _serve(kind: str, upstream: str | None, overrides: dict[str, Any], q: Any) -> None:
    import uvicorn

    from llmtop.asgi.uvicorn_runner import bind, url_of

    if kind == "upstream":
        app: Any = instant_upstream
    else:
        from llmtop.gateway.server.app import create_app
        from llmtop.settings import GatewaySettings

        app = create_app(GatewaySettings(upstream=upstream or "", **overrides))
    sock = bind("127.0.0.1", 0)
    q.put(url_of(sock))
    config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


class Proc:
    """A server in a child process; its URL and pid."""

    def __init__(self, kind: str, upstream: str | None = None, **overrides: Any) -> None:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        self.p = ctx.Process(target=_serve, args=(kind, upstream, overrides, q), daemon=True)
        self.p.start()
        self.url: str = q.get(timeout=60)
        for _ in range(500):
            try:
                httpx.get(self.url + "/healthz", timeout=1.0)
                break
            except httpx.HTTPError:
                time.sleep(0.02)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.p.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def cpu_s(self) -> float:
        """User + system CPU seconds the process has used."""
        fields = Path(f"/proc/{self.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.p.terminate()
        self.p.join(10)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


async def one(c: httpx.AsyncClient, url: str, out: dict[str, list[float]]) -> None:
    t0 = time.perf_counter()
    async with c.stream("POST", url + "/v1/completions", content=BODY) as r:
        first: float | None = None
        async for _ in r.aiter_raw():
            if first is None:
                first = time.perf_counter()
        end = time.perf_counter()
    if r.status_code != 200 or first is None:
        raise RuntimeError(f"{url}: status {r.status_code}")
    out["ttft"].append(first - t0)
    out["e2e"].append(end - t0)
    if "x-llmtop-handler-to-headers-ms" in r.headers:
        out["to_headers"].append(float(r.headers["x-llmtop-handler-to-headers-ms"]) / 1000.0)


async def block(
    c: httpx.AsyncClient, url: str, n: int, conc: int, out: dict[str, list[float]]
) -> None:
    sem = asyncio.Semaphore(conc)

    async def go() -> None:
        async with sem:
            await one(c, url, out)

    await asyncio.gather(*(go() for _ in range(n)))


async def latency(up: Proc, gw: Proc, conc: int, n: int, rounds: int) -> dict[str, Any]:
    """Alternate direct and gateway blocks so drift on a noisy box hits both alike; count the
    CPU the gateway process spends per request (and the upstream's, for scale)."""
    res: dict[str, Any] = {
        k: {"ttft": [], "e2e": [], "to_headers": []} for k in ("direct", "gateway")
    }
    limits = httpx.Limits(max_connections=conc + 8, max_keepalive_connections=conc + 8)
    gw_cpu = up_cpu = 0.0
    async with httpx.AsyncClient(timeout=60, limits=limits) as c:
        await block(c, up.url, min(n, 50), conc, {"ttft": [], "e2e": [], "to_headers": []})
        await block(c, gw.url, min(n, 50), conc, {"ttft": [], "e2e": [], "to_headers": []})
        for _ in range(rounds):
            t = up.cpu_s()
            await block(c, up.url, n // rounds, conc, res["direct"])
            up_cpu += up.cpu_s() - t
            t = gw.cpu_s()
            await block(c, gw.url, n // rounds, conc, res["gateway"])
            gw_cpu += gw.cpu_s() - t

    # the handler's own time over the whole request (the warm-up included: 50 of n + 50), on a
    # connection of its own: a pooled one may be closing after the server's keep-alive timeout
    async with httpx.AsyncClient(timeout=60) as fresh:
        res["whole"] = (await fresh.get(gw.url + "/admin/stats")).json()["handler_s"]
    done = rounds * (n // rounds)
    res["gw_cpu_per_req"] = gw_cpu / done
    res["up_cpu_per_req"] = up_cpu / done
    return res


async def rate_over_http(url: str, n: int, conc: int, status: int) -> float:
    """Requests per second one client gets from `url` (all answered with `status`)."""
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:
        sem = asyncio.Semaphore(conc)
        codes: list[int] = []

        async def go() -> None:
            async with sem:
                r = await c.post(url + "/v1/completions", content=BODY)
                codes.append(r.status_code)

        t0 = time.perf_counter()
        await asyncio.gather(*(go() for _ in range(n)))
        dt = time.perf_counter() - t0
    assert codes.count(status) == n, f"expected only {status}s, got {set(codes)}"
    return n / dt


async def rejections_in_process(n: int) -> float:
    ctl = AdmissionController(Limits(max_concurrency=1, max_queue=0, queue_timeout_s=30))
    ctl.set_paused(True)
    t0 = time.perf_counter()
    for _ in range(n):
        with contextlib.suppress(Rejected):
            ctl.enter()
    return n / (time.perf_counter() - t0)


async def queued_memory_in_process(n: int) -> float:
    ctl = AdmissionController(Limits(max_concurrency=1, max_queue=n, queue_timeout_s=300))
    ctl.set_paused(True)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tickets = [ctl.enter() for _ in range(n)]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert ctl.queued == n
    del tickets
    return (after - before) / n


async def queued_memory_over_http(n: int) -> tuple[float, int]:
    gw_up = Proc("upstream")
    gw = Proc("gateway", gw_up.url, max_queue=n, max_concurrency=1, queue_timeout_s=300.0)
    try:
        limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=120, limits=limits) as c:
            await c.post(gw.url + "/admin/pause")
            await asyncio.sleep(0.3)
            base = gw.rss_kib()
            tasks = [
                asyncio.ensure_future(c.post(gw.url + "/v1/completions", content=BODY))
                for _ in range(n)
            ]
            queued = 0
            for _ in range(600):
                queued = (await c.get(gw.url + "/admin/stats")).json()["queued"]
                if queued >= n:
                    break
                await asyncio.sleep(0.05)
            loaded = gw.rss_kib()
            await c.post(gw.url + "/admin/resume")
            # a box this busy may drop a few of the 2,000 connections; they don't change the figure
            await asyncio.gather(*tasks, return_exceptions=True)
        return (loaded - base) * 1024 / max(queued, 1), queued
    finally:
        gw.stop()
        gw_up.stop()


def ms(v: float) -> str:
    return f"{v * 1000:.2f}"


async def figures(up: Proc, conc: int, n: int) -> dict[str, float]:
    """One latency measurement against a fresh gateway: every figure of a table row."""
    gw = Proc("gateway", up.url, max_concurrency=4096, max_queue=4096)
    try:
        r = await latency(up, gw, conc, n, rounds=4)
    finally:
        gw.stop()
    d, g = r["direct"], r["gateway"]
    out = {"requests": float(len(d["ttft"]))}
    for q in (0.5, 0.99):
        for k in ("ttft", "e2e"):
            out[f"{k}{q}_direct"] = pct(d[k], q)
            out[f"{k}{q}_gw"] = pct(g[k], q)
            out[f"{k}{q}_added"] = pct(g[k], q) - pct(d[k], q)
        out[f"to_headers{q}"] = pct(g["to_headers"], q)
    out["handler0.5"] = r["whole"]["p50"]
    out["handler0.95"] = r["whole"]["p95"]
    out["gw_cpu"] = r["gw_cpu_per_req"]
    out["up_cpu"] = r["up_cpu_per_req"]
    return out


def row(conc: int, runs: list[dict[str, float]]) -> str:
    """A table row: each figure the median over the runs (one run: that run's)."""
    f = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    added = f["e2e0.5_added"]
    cells = [
        str(conc) + (f" (median of {len(runs)})" if len(runs) > 1 else ""),
        f"{f['requests']:.0f}+{f['requests']:.0f}" + (f" x{len(runs)}" if len(runs) > 1 else ""),
        f"{ms(f['ttft0.5_direct'])} / {ms(f['ttft0.5_gw'])} / **{ms(f['ttft0.5_added'])}**",
        f"{ms(f['ttft0.99_direct'])} / {ms(f['ttft0.99_gw'])} / **{ms(f['ttft0.99_added'])}**",
        f"**{ms(added)}** / {ms(f['e2e0.99_added'])}",
        f"**{ms(f['handler0.5'])}** / {ms(f['handler0.95'])}",
        f"{f['handler0.5'] / added:.2f}" if added > 0 else "n/a",
        f"{ms(f['to_headers0.5'])} / {ms(f['to_headers0.99'])}",
        f"{ms(f['gw_cpu'])} ({ms(f['up_cpu'])})",
    ]
    return "| " + " | ".join(cells) + " |"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--concurrency", default="1,64,256")
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs per concurrency (fresh gateway each); medians"
    )
    ap.add_argument("--latency-only", action="store_true", help="skip the 429 and memory parts")
    args = ap.parse_args()
    scale = 0.25 if args.quick else 1.0
    up = Proc("upstream")
    full = Proc("gateway", up.url, max_concurrency=1, max_queue=0)
    async with httpx.AsyncClient() as c:
        await c.post(full.url + "/admin/pause")
    print("## Gateway overhead (bench/bench_gateway.py)\n")
    print(
        "Instant upstream (4 SSE chunks, no think time), gateway and upstream in their own "
        "processes, one httpx client; direct and gateway blocks alternate; a fresh gateway per "
        "run. Added = gateway - direct. Handler time is the gateway's own measure "
        "(`/admin/stats` `handler_s`, `llmtop_gateway_handler_seconds`): the whole request in "
        "the handler (request path, response headers, relaying the chunks), queue and "
        "upstream waits excluded; the `x-llmtop-handler-to-headers-ms` header is the same up "
        "to the response headers. "
        "Load average at the start: {:.2f} {:.2f} {:.2f}.\n".format(*os.getloadavg())
    )
    print(
        "| concurrency | requests | TTFT p50 direct / gw / added ms | TTFT p99 direct / gw / "
        "added ms | E2E p50 / p99 added ms | handler time p50 / p95 ms "
        "| handler p50 / E2E added p50 | to-headers header p50 / p99 ms "
        "| gateway CPU per request (upstream's) ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for conc in [int(x) for x in args.concurrency.split(",")]:
            n = int((400 if conc == 1 else 1024) * scale)
            runs = [await figures(up, conc, n) for _ in range(max(1, args.repeat))]
            print(row(conc, runs), flush=True)
        if args.latency_only:
            return
        n429 = int(2000 * scale)
        http_rate = await rate_over_http(full.url, n429, 64, 429)
        direct_rate = await rate_over_http(up.url, n429, 64, 200)
        pure_rate = await rejections_in_process(200_000)
    finally:
        for p in (full, up):
            p.stop()
    mem_pure = await queued_memory_in_process(10_000)
    mem_http, queued = await queued_memory_over_http(int(2000 * scale))
    print()
    print("| measure | value |")
    print("|---|---|")
    print(
        f"| 429s per second over HTTP (queue full, 64 clients, {n429:,} requests) "
        f"| {http_rate:,.0f} |"
    )
    print(
        f"| the same client against the instant upstream directly (200s per second) "
        f"| {direct_rate:,.0f} |"
    )
    print(f"| 429 decisions per second, admission alone | {pure_rate:,.0f} |")
    print(f"| memory per queued request, admission alone (10,000 queued) | {mem_pure:,.0f} B |")
    print(
        f"| memory per queued request, gateway process RSS ({queued:,} queued over HTTP) "
        f"| {mem_http / 1024:,.1f} KiB |"
    )
    print(
        "\nThe HTTP 429 rate is bounded by the one Python client on this box as much as by the "
        "gateway; the admission-alone figure is the decision itself."
    )


if __name__ == "__main__":
    asyncio.run(main())
