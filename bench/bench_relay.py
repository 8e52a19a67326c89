"""The gateway's data path, side by side over source trees in one run: CPU per relayed chunk,
memory per queued request, and the TTFT it adds with many concurrent streams.

Each tree's `llmtop gateway` runs as its own process (PYTHONPATH = the tree) in front of one
instant upstream (a raw ASGI app on uvicorn, in its own process: K SSE chunks at once, K from
the query string). Rounds alternate the trees, so a busy box weighs on each alike.

- CPU per chunk: the gateway's user+system CPU over n streamed requests of 68 chunks, less
  that over n of 4 chunks, over n x 64: the per-request cost cancels out. The chunks come
  1 ms apart, each its own TCP segment, as an engine streams tokens (sent at once they
  coalesce, and the gateway relays a few large reads instead).
- Memory per queued request: the gateway paused, N raw sockets each send one request; RSS
  with N queued less RSS before, over N.
- Added TTFT: S long streams in flight through the gateway (a chunk each 33 ms), then probe
  requests one at a time, directly and through the gateway in turn: p50 and p99 of each. The
  streams' client shares this process with the probes; bench_added_ttft.py keeps them apart
  and at a modest rate, for the figure at 1,000 streams.

    python bench/bench_relay.py --trees /work/wt/chaos-base /work/wt/chaos
    python bench/bench_relay.py --trees A B --rounds 3 --streams 1000 --queued 5000
    python bench/bench_relay.py --trees . --rounds 1 --streams 10 --profile /tmp/prof  # cProfile

Loopback only; bounded (each phase has a count and a 120 s deadline).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

CHUNK = b'data: {"choices": [{"text": "token"}]}\n\n'
BODY = b'{"model": "m", "prompt": "hello", "max_tokens": 4, "stream": true}'


async def lifespan_or_body(scope: dict[str, Any], receive: Any, send: Any) -> bool:
    """A raw ASGI upstream's start: True once it has answered the lifespan (nothing left to
    do), else False with the request's body read (bench_history's upstream shares it)."""
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            await send({"type": m["type"] + ".complete"})
            if m["type"] == "lifespan.shutdown":
                return True
    while (await receive()).get("more_body"):
        pass
    return False


async def instant(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An engine that answers at once: K chunks (?chunks=K, default 4) and [DONE]."""
    if await lifespan_or_body(scope, receive, send):
        return
    args = dict(kv.split("=", 1) for kv in scope["query_string"].decode().split("&") if kv)
    k, gap_s = int(args.get("chunks", 4)), float(args.get("gap_ms", 0)) / 1000
    await send(
        {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"text/event-stream")]}
    )  # fmt: skip
    for _ in range(k):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
        if gap_s:
            await asyncio.sleep(gap_s)  # each chunk its own segment, as an engine streams
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _serve_upstream(q: Any) -> None:
    import uvicorn

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from llmtop.asgi.uvicorn_runner import bind, url_of

    sock = bind("127.0.0.1", 0)
    q.put(url_of(sock))
    uvicorn.Server(uvicorn.Config(instant, log_level="error", access_log=False, lifespan="on")).run(
        sockets=[sock]
    )


class Gateway:
    """`llmtop gateway` of one source tree, in its own process."""

    def __init__(self, tree: Path, upstream: str, profile: Path | None = None) -> None:
        self.tree = tree
        self.profiled = profile is not None
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable]
        if profile is not None:  # cProfile writes it when the gateway exits (at `stop`)
            cmd += ["-m", "cProfile", "-o", str(profile.resolve())]
        cmd += ["-m", "llmtop", "gateway", "--vllm", upstream]
        cmd += ["--listen", "127.0.0.1:0", "--max-concurrency", "4096", "--max-queue", "20000"]
        cmd += ["--queue-timeout-s", "300"]
        self.proc = subprocess.Popen(
            cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        self.url = line.split(" on ", 1)[1].split()[0]

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        # SIGINT under cProfile: uvicorn raises the signal again once stopped, and only
        # KeyboardInterrupt (not a death by SIGTERM) lets cProfile write its file
        self.proc.send_signal(signal.SIGINT if self.profiled else signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


async def requests(url: str, n: int, conc: int, chunks: int, gap_ms: float = 1.0) -> list[float]:
    """n streamed requests, conc at once, of `chunks` chunks `gap_ms` apart; each one's
    seconds to its first chunk."""
    ttft: list[float] = []
    todo = iter(range(n))
    target = f"{url}/v1/completions?chunks={chunks}&gap_ms={gap_ms:g}"

    async def client(s: aiohttp.ClientSession) -> None:
        for _ in todo:
            t0 = time.perf_counter()
            async with s.post(target, data=BODY) as r:
                assert r.status == 200, r.status
                first = True
                async for _chunk in r.content.iter_any():
                    if first:
                        ttft.append(time.perf_counter() - t0)
                        first = False

    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        await asyncio.wait_for(asyncio.gather(*(client(s) for _ in range(conc))), 120)
    return ttft


async def cpu_per_chunk_us(gw: Gateway, n: int, conc: int) -> float:
    cost = {}
    for k in (4, 68):
        await requests(gw.url, 32, conc, k)  # warm the pools
        c0 = gw.cpu_s()
        await requests(gw.url, n, conc, k)
        cost[k] = (gw.cpu_s() - c0) / n
    return (cost[68] - cost[4]) / 64 * 1e6


async def added_ttft(gw: Gateway, upstream: str, streams: int, probes: int) -> dict[str, float]:
    """TTFT of probe requests, direct and through the gateway in turn, while the gateway
    relays `streams` long streams (a chunk each 33 ms, 30 tokens/s)."""
    background = asyncio.ensure_future(requests(gw.url, streams, streams, 3000, 33.0))
    await asyncio.sleep(3.0)  # all of them open and streaming
    out: dict[str, list[float]] = {"direct": [], "gw": []}
    try:
        for _ in range(probes):
            out["direct"] += await requests(upstream, 1, 1, 1, 0)
            out["gw"] += await requests(gw.url, 1, 1, 1, 0)
    finally:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)
    return {
        f"{k}_{q}": pct(v, p) * 1e3
        for k, v in out.items()
        for q, p in (("p50", 0.5), ("p99", 0.99))
    }


async def queued_kib(gw: Gateway, n: int) -> float:
    async with aiohttp.ClientSession() as s:
        await (await s.post(gw.url + "/admin/pause")).read()
        await asyncio.sleep(0.5)
        base = gw.rss_kib()
        host, port = gw.url.split("//")[1].split(":")
        head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(BODY)
        socks = []
        try:
            for _ in range(n):
                sk = socket.create_connection((host, int(port)))
                sk.sendall(head + BODY)
                socks.append(sk)
            queued, deadline = 0, time.monotonic() + 120
            while queued < n and time.monotonic() < deadline:
                async with s.get(gw.url + "/admin/stats") as r:
                    queued = (await r.json())["queued"]
                await asyncio.sleep(0.1)
            loaded = gw.rss_kib()
        finally:
            for sk in socks:
                sk.close()
            await (await s.post(gw.url + "/admin/resume")).read()
        return (loaded - base) / max(queued, 1)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs="+", type=Path, required=True, help="source trees")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=600, help="per CPU phase")
    ap.add_argument("--concurrency", type=int, default=16, help="for the CPU phases")
    ap.add_argument("--streams", type=int, default=1000, help="in flight, for the added TTFT")
    ap.add_argument("--probes", type=int, default=200, help="TTFT probes each way")
    ap.add_argument("--queued", type=int, default=3000, help="for the memory per queued")
    ap.add_argument("--profile", type=Path, help="a folder: each tree's gateway under cProfile")
    a = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # children inherit it
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    q = mp.get_context("spawn").Queue()
    up_proc = mp.get_context("spawn").Process(target=_serve_upstream, args=(q,), daemon=True)
    up_proc.start()
    upstream = q.get(timeout=60)
    profiles = [None if a.profile is None else a.profile / f"{i}.prof" for i in range(len(a.trees))]
    gws = [Gateway(t.resolve(), upstream, p) for t, p in zip(a.trees, profiles, strict=True)]
    figures: dict[str, dict[str, list[float]]] = {str(g.tree): {} for g in gws}
    try:
        for _ in range(a.rounds):
            for g in gws:
                f = figures[str(g.tree)]
                f.setdefault("cpu_us", []).append(
                    await cpu_per_chunk_us(g, a.requests, a.concurrency)
                )
                for name, v in (await added_ttft(g, upstream, a.streams, a.probes)).items():
                    f.setdefault(name, []).append(v)
        for g in gws:
            figures[str(g.tree)]["queued_kib"] = [await queued_kib(g, a.queued)]
    finally:
        for g in gws:
            g.stop()
        up_proc.terminate()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"| tree | CPU per relayed chunk, us (median of {a.rounds}) | probe TTFT p50 / p99 with"
        f" {a.streams} streams in flight, direct ms | through the gateway ms | added p99 ms "
        f"| memory per queued request ({a.queued:,} queued) |"
    )
    print("|---|---|---|---|---|---|")
    for tree, f in figures.items():
        med = {k: statistics.median(v) for k, v in f.items()}
        print(
            f"| {tree} | {med['cpu_us']:.1f} ({', '.join(f'{x:.1f}' for x in f['cpu_us'])}) "
            f"| {med['direct_p50']:.1f} / {med['direct_p99']:.1f} "
            f"| {med['gw_p50']:.1f} / {med['gw_p99']:.1f} "
            f"| {med['gw_p99'] - med['direct_p99']:.1f} | {med['queued_kib']:.1f} KiB |"
        )


if __name__ == "__main__":
    asyncio.run(main())
