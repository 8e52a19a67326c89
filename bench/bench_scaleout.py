"""The cost of shared limits: the Redis round trip on the admission path, side by side with the
single-process gateway, in one run on loopback.

One `llmtop sim` (fast profile), one redis-server, and two gateway processes in front of the
same sim: `local` (limits in the process, today's gateway) and `redis` (--redis: limits held in
Redis). Requests are 1-token completions sent one after another (concurrency 1), alternating
between the two gateways in blocks so drift hits both alike. At concurrency 1 every request
on the redis gateway arrives with no room held (the previous one gave its slot back), so each
one waits for a grant: one Redis round trip, the worst case per request. A second pass at
concurrency 8 against max_concurrency 4 keeps the cap full, so grants move between requests.

Reported per gateway: client latency p50/p99, the queue time the gateway reports
(x-llmtop-queue-ms: the wait for room, which is the wait for Redis on the redis gateway) and
the difference of the p50s: the added latency per request.

    python bench/bench_scaleout.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtop.core.derive.percentiles import percentile_linear as _percentile  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile of a pass's samples (every pass has some)."""
    p = _percentile(values, q)
    assert p is not None
    return p


BODY = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_up(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=0.5)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer")


async def _client(
    c: httpx.AsyncClient, url: str, todo: Iterator[int], lat: list[float], queue: list[float]
) -> None:
    for _ in todo:
        t0 = time.perf_counter()
        r = await c.post(url + "/v1/completions", json=BODY)
        lat.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.text
        queue.append(float(r.headers["x-llmtop-queue-ms"]))


async def run_pass(
    urls: dict[str, str], n: int, conc: int, block: int = 50
) -> dict[str, tuple[list[float], list[float]]]:
    """n requests per gateway, `conc` at a time, alternating gateways every `block`."""
    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in urls}
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as c:
        for url in urls.values():  # warm up connections and the engine
            for _ in range(20):
                await c.post(url + "/v1/completions", json=BODY)
        for start in range(0, n, block):
            for name, url in urls.items():
                todo = iter(range(min(block, n - start)))
                await asyncio.gather(*(_client(c, url, todo, *out[name]) for _ in range(conc)))
    return out


def report(title: str, res: dict[str, tuple[list[float], list[float]]]) -> None:
    print(f"\n{title}")
    print(f"{'gateway':8} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'queue p50':>10} {'queue p99':>10}")
    p50s = {}
    for name, (lat, q) in res.items():
        p50s[name] = percentile(lat, 50)
        print(
            f"{name:8} {len(lat):5d} {percentile(lat, 50):8.3f} {percentile(lat, 99):8.3f}"
            f" {percentile(q, 50):10.3f} {percentile(q, 99):10.3f}"
        )
    lat_l, lat_r = res["local"][0], res["redis"][0]
    print(
        f"added by Redis: p50 {p50s['redis'] - p50s['local']:+.3f} ms,"
        f" p99 {percentile(lat_r, 99) - percentile(lat_l, 99):+.3f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="per gateway and pass")
    args = ap.parse_args()
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("no redis-server on PATH (.ci/install-system-tools installs it)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = [sys.executable, "-m", "llmtop"]
    rport, sport, lport, gport = (free_port() for _ in range(4))
    sim_url = f"http://127.0.0.1:{sport}"
    procs = [
        subprocess.Popen(
            [
                binary,
                "--port",
                str(rport),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [*py, "sim", "--profile", "fast", "--port", str(sport)],
            env=env,
            stdout=subprocess.DEVNULL,
        ),
    ]
    common = ["--vllm", sim_url, "--max-concurrency", "4", "--max-queue", "256"]
    procs.append(
        subprocess.Popen(
            [*py, "gateway", "--listen", f"127.0.0.1:{lport}", *common],
            env=env,
            stdout=subprocess.DEVNULL,
        )
    )
    redis_url = f"redis://127.0.0.1:{rport}/0"
    procs.append(
        subprocess.Popen(
            [*py, "gateway", "--listen", f"127.0.0.1:{gport}", "--redis", redis_url, *common],
            env=env,
            stdout=subprocess.DEVNULL,
        )
    )
    urls = {"local": f"http://127.0.0.1:{lport}", "redis": f"http://127.0.0.1:{gport}"}
    try:
        for u in [sim_url, *urls.values()]:
            wait_up(u + "/health" if u == sim_url else u + "/healthz")
        print(
            f"bench_scaleout: {args.requests} 1-token requests per gateway and pass, one sim (fast)"
        )
        report(
            "concurrency 1 (each request waits for a grant on the redis gateway)",
            asyncio.run(run_pass(urls, args.requests, 1)),
        )
        report(
            "concurrency 8, max_concurrency 4 (cap full, grants move between requests)",
            asyncio.run(run_pass(urls, args.requests, 8)),
        )
        stats = httpx.get(urls["redis"] + "/admin/stats").json()
        shared = stats["shared"]
        print(f"\nredis gateway: shared {shared['status']}, fallbacks {shared['fallbacks']}")
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    main()
