"""Soak: 10,000 queued connections over real sockets through a real `llmtop gateway` process.

Phase 1: one request holds the only slot; 10,000 more queue on their own connections; then every
client drops its connection (RST). Phase 2: the gateway is paused, 10,000 queue, it resumes at
max_concurrency 64 and all of them are served by a quick upstream. After each phase the gateway
must be at rest (in_flight = queued = 0, offered = the sum of outcomes) with its file descriptors
back to where they started, and every client must have got its answer (requests lost = 0).
Also measured: the gateway's memory per queued request (RSS with 10,000 queued minus idle).

Loopback only; bounded in count and time (each phase gives up after --deadline seconds). The
soft open-files limit is raised to the hard one (the gateway, a child, inherits it).

    python bench/soak_gateway.py            # prints a markdown section
    python bench/soak_gateway.py --n 2000   # smaller
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BODY_HOLD = b'{"prompt": "x", "stream": true, "hold": true}'
BODY = b'{"prompt": "x", "stream": true}'
SSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"


async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An engine: held streams for {"hold": true}, three quick chunks otherwise."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            if head.startswith(b"GET /health"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            chunk = b'data: {"i": 0}\n\n'
            writer.write(SSE + b"\r\n" + b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if b'"hold"' in body:
                await reader.read()  # until the gateway lets go
                return
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass  # the client left, or the soak is over
    finally:
        writer.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def fds(pid: int) -> int:
    """Open sockets of a process."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return n


async def at_rest(gw: Gateway) -> int:
    """The gateway's sockets once idle keep-alive connections have expired (2 s in the
    gateway's upstream pool, 5 s for clients in uvicorn): wait past both, then count."""
    await asyncio.sleep(6.0)
    return fds(gw.proc.pid)


class Gateway:
    """`llmtop gateway` in its own process, and a raw admin client."""

    def __init__(self, upstream_url: str, n: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "gateway", "--vllm", upstream_url,
             "--listen", "127.0.0.1:0", "--max-concurrency", "1", "--max-queue", str(n),
             "--queue-timeout-s", "3600"],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"},
        )  # fmt: skip
        assert self.proc.stdout is not None
        banner = self.proc.stdout.readline()
        url = banner.split(" on ", 1)[1].split()[0]
        self.port = int(url.rsplit(":", 1)[1])

    async def admin(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = json.dumps(body).encode() if body is not None else b""
        writer.write(
            b"%s %s HTTP/1.1\r\nhost: gw\r\nconnection: close\r\ncontent-type: application/json"
            b"\r\ncontent-length: %d\r\n\r\n%s" % (method.encode(), path.encode(), len(data), data)
        )
        raw = await reader.read()
        writer.close()
        result: dict[str, Any] = json.loads(raw.partition(b"\r\n\r\n")[2])
        return result

    async def wait(self, pred: Any, deadline: float, what: str) -> dict[str, Any]:
        while True:
            s = await self.admin("GET", "/admin/stats")
            if pred(s):
                return s
            if time.monotonic() > deadline:
                raise SystemExit(f"soak: gave up waiting for {what}: {s}")
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def post(port: int, body: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    return reader, writer


async def open_many(port: int, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    conns = []
    for start in range(0, n, 500):
        conns += await asyncio.gather(*(post(port, BODY) for _ in range(min(500, n - start))))
    return conns


def rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def accounted(s: dict[str, Any]) -> bool:
    return bool(
        s["in_flight"] == 0 and s["queued"] == 0 and s["offered"] == sum(s["outcomes"].values())
    )


async def phase_cancel(gw: Gateway, n: int, deadline_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    # warm: one request through, so the upstream pool and the loop's own fds exist
    r, w = await post(gw.port, BODY)
    await r.readuntil(b"0\r\n\r\n")
    w.close()
    fd0, rss0 = await at_rest(gw), rss_bytes(gw.proc.pid)
    reader, holder = await post(gw.port, BODY_HOLD)
    await asyncio.wait_for(reader.readuntil(b'"i": 0'), 30)
    t0 = time.monotonic()
    conns = await open_many(gw.port, n)
    await gw.wait(lambda s: s["queued"] == n, deadline, f"{n} queued")
    queued_s = time.monotonic() - t0
    rss_full = rss_bytes(gw.proc.pid)
    t1 = time.monotonic()
    for _, w in conns:
        rst(w)
    rst(holder)
    s = await gw.wait(accounted, deadline, "all cancelled")
    cancel_s = time.monotonic() - t1
    fd1 = await at_rest(gw)
    return {
        "queued_s": queued_s,
        "cancel_s": cancel_s,
        "per_queued_bytes": (rss_full - rss0) / n,
        "cancelled": s["outcomes"]["cancelled"],
        "offered": s["offered"],
        "fds_before": fd0,
        "fds_after": fd1,
    }


async def phase_drain(gw: Gateway, n: int, deadline_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    before = await gw.admin("GET", "/admin/stats")
    await gw.admin("POST", "/admin/pause")
    conns = await open_many(gw.port, n)
    await gw.wait(lambda s: s["queued"] == n, deadline, f"{n} queued (paused)")
    t0 = time.monotonic()
    await gw.admin("PATCH", "/admin/limits", {"max_concurrency": 64})
    await gw.admin("POST", "/admin/resume")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            data = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), deadline_s)
            return data.startswith(b"HTTP/1.1 200") and b'"i": 0' in data
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return False
        finally:
            writer.close()

    served = await asyncio.gather(*(answer(r, w) for r, w in conns))
    drain_s = time.monotonic() - t0
    s = await gw.wait(accounted, deadline, "all served")
    fd1 = await at_rest(gw)
    return {
        "fds_after": fd1,
        "drain_s": drain_s,
        "served": sum(served),
        "lost": n - sum(served),
        "completed": s["outcomes"]["completed"] - before["outcomes"]["completed"],
    }


async def main(n: int, deadline_s: float) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < n + 500:
        raise SystemExit(f"soak: open-files hard limit {hard} is below {n + 500}; use --n")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    up_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    gw = Gateway(up_url, n)
    try:
        cancel = await phase_cancel(gw, n, deadline_s)
        drain = await phase_drain(gw, n, deadline_s)
    finally:
        gw.stop()
        server.close()
    ok = (
        cancel["cancelled"] == n + 1
        and drain["lost"] == 0
        and drain["completed"] == n
        and cancel["fds_after"] <= cancel["fds_before"]
        and drain["fds_after"] <= cancel["fds_before"]
    )
    print(f"## Soak: {n:,} queued connections through the gateway\n")
    print(f"open-files limit raised {soft} -> {hard}; loopback; gateway in its own process.\n")
    c, d = cancel, drain
    rows = [
        ("cancel", f"time to queue {n:,} connections", f"{c['queued_s']:.1f} s"),
        ("cancel", "gateway memory per queued request", f"{c['per_queued_bytes'] / 1024:.1f} KiB"),
        ("cancel", "all dropped -> accounted", f"{c['cancel_s']:.1f} s"),
        ("cancel", "cancelled / offered", f"{c['cancelled']:,} / {c['offered']:,}"),
        (
            "cancel",
            "gateway sockets at rest before / after",
            f"{c['fds_before']} / {c['fds_after']}",
        ),
        ("drain", f"{n:,} served after resume (cap 64)", f"{d['drain_s']:.1f} s"),
        (
            "drain",
            "served / completed / lost",
            f"{d['served']:,} / {d['completed']:,} / {d['lost']}",
        ),
        ("drain", "gateway sockets at rest after", f"{d['fds_after']}"),
    ]
    print("| phase | figure | value |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nresult: {'PASS' if ok else 'FAIL'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="queued connections per phase")
    p.add_argument("--deadline", type=float, default=300.0, help="seconds per phase at most")
    args = p.parse_args()
    asyncio.run(main(args.n, args.deadline))
