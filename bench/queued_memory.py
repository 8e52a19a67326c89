"""What a queued request holds in the gateway's Python heap, by who allocated it (tracemalloc).

The gateway app runs in this process (uvicorn on its own thread, admission paused) with
tracemalloc on; a child process opens N connections and sends one completion request on each,
and holds them. The heap with N queued, less the heap before, over N: in all, and by the file
of the allocating frame (llmtop's own, uvicorn, asyncio, starlette, the rest), with llmtop's
lines itemised. The request is the one of bench_relay.py (69 bytes of JSON).

    python bench/queued_memory.py --queued 2000

Loopback only; bounded: N connections, a 120 s deadline for them to be queued.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import socket
import sys
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from llmtop.asgi.uvicorn_runner import ServerThread  # noqa: E402
from llmtop.gateway.server.app import create_app  # noqa: E402
from llmtop.settings import GatewaySettings  # noqa: E402

BODY = b'{"model": "m", "prompt": "hello", "max_tokens": 4, "stream": true}'
HOUSES = ("llmtop", "uvicorn", "starlette", "asyncio", "httptools", "h11")


def _clients(port: int, n: int, sent: Any, done: Any) -> None:
    """In its own process: n connections, one request each, held until `done`."""
    head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(BODY)
    socks = []
    for _ in range(n):
        sk = socket.create_connection(("127.0.0.1", port))
        sk.sendall(head + BODY)
        socks.append(sk)
    sent.set()
    done.wait(300)
    for sk in socks:
        sk.close()


def house(filename: str) -> str:
    """Which package a file belongs to (the allocating frame's)."""
    parts = Path(filename).parts
    for name in HOUSES:
        if name in parts:
            return name
    return Path(filename).name if "python3" in filename else "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queued", type=int, default=2000)
    ap.add_argument("--lines", type=int, default=30, help="the biggest lines listed")
    a = ap.parse_args()
    settings = GatewaySettings(
        upstream="http://127.0.0.1:9", max_concurrency=1, max_queue=a.queued + 10,
        queue_timeout_s=300.0,
    )  # fmt: skip
    tracemalloc.start(1)
    server = ServerThread(create_app(settings)).start()
    ctx = mp.get_context("spawn")
    sent, done = ctx.Event(), ctx.Event()
    try:
        httpx.post(server.url + "/admin/pause", timeout=5)
        gc.collect()
        before = tracemalloc.take_snapshot()
        child = ctx.Process(target=_clients, args=(server.port, a.queued, sent, done))
        child.start()
        deadline = time.monotonic() + 120
        queued = 0
        while queued < a.queued and time.monotonic() < deadline:
            queued = httpx.get(server.url + "/admin/stats", timeout=5).json()["queued"]
            time.sleep(0.2)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        done.set()
        server.stop()
    by_house: dict[str, int] = defaultdict(int)
    ours: list[tuple[int, str]] = []
    for d in after.compare_to(before, "lineno"):
        frame = d.traceback[0]
        by_house[house(frame.filename)] += d.size_diff
        if d.size_diff > 0:
            parts = Path(frame.filename).parts
            name = "/".join(parts[parts.index("llmtop") :] if "llmtop" in parts else parts[-2:])
            ours.append((d.size_diff, f"{name}:{frame.lineno}"))
    total = sum(by_house.values())
    print(f"{queued:,} queued; the heap grew {total / 1024 / queued:.2f} KiB per request")
    print("\n| allocated in | KiB per queued request |\n|---|---|")
    for name, size in sorted(by_house.items(), key=lambda kv: -kv[1]):
        if abs(size) / queued >= 16:
            print(f"| {name} | {size / 1024 / queued:.2f} |")
    print("\n| line (the allocating frame) | bytes per queued request |\n|---|---|")
    for size, where in sorted(ours, reverse=True)[: a.lines]:
        print(f"| {where} | {size / queued:.0f} |")


if __name__ == "__main__":
    main()
