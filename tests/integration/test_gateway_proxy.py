"""The gateway over real sockets against purpose-built upstreams: streaming, queueing, 429s,
priority, timeouts, live limits, disconnects, upstream faults and the accounting."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from llmtop.serving import ServerThread

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class FakeUpstream:
    """An OpenAI-ish SSE upstream; each request's JSON body picks its behaviour:
    tag (recorded in arrival order), chunks, hold_after (chunks sent before waiting on the
    gate), hang (never answers), status (answer with that status)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.arrivals: list[str] = []
        self.active = 0
        self.aborted = 0
        self.completed = 0

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/echo":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            extra = [(b"keep-alive", b"timeout=5"), (b"x-up", b"1"), (b"set-cookie", b"s=user1")]
            await _json(send, 200, headers, extra)
            return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["path"] == "/v1/models":
            await _json(send, 200, {"object": "list", "data": [{"id": "fake"}]})
            return
        opts = json.loads(body or b"{}")
        self.arrivals.append(str(opts.get("tag", "")))
        work = asyncio.ensure_future(self._answer(opts, send))
        watcher = asyncio.ensure_future(receive())
        self.active += 1
        try:
            await asyncio.wait((work, watcher), return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                self.aborted += 1
                work.cancel()
            else:
                self.completed += 1
        finally:
            self.active -= 1
            watcher.cancel()

    async def _answer(self, opts: dict[str, Any], send: Send) -> None:
        if opts.get("hang"):
            await asyncio.sleep(60)
        if "status" in opts:
            await _json(send, opts["status"], {"detail": "boom"})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for i in range(int(opts.get("chunks", 3))):
            if i == opts.get("hold_after", -1):
                # the gate is a threading.Event set from the test's thread: poll it
                while not self.gate.is_set():  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
            chunk = f'data: {{"i": {i}}}\n\n'.encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _json(
    send: Send, status: int, obj: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps(obj).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RawUpstream:
    """A socket server that answers every request with fixed bytes, then resets the
    connection: an upstream dying mid-stream, or one speaking garbage."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    part = conn.recv(65536)
                    if not part:
                        break
                    data += part
                conn.sendall(self.reply)
                time.sleep(0.2)  # let the peer read the reply before the reset discards it
                # RST instead of FIN: the peer sees a reset
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def upstream(serve_app: Callable[[Any], ServerThread]) -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    server = serve_app(fake)
    yield fake, server.url
    fake.gate.set()


async def stats(c: httpx.AsyncClient) -> dict[str, Any]:
    r = await c.get("/admin/stats")
    assert r.status_code == 200
    data: dict[str, Any] = r.json()
    return data


async def wait_stats(
    c: httpx.AsyncClient, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 5.0
) -> dict[str, Any]:
    """Poll /admin/stats until `pred` holds (bounded), and return the stats that satisfied it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        s = await stats(c)
        if pred(s):
            return s
        assert loop.time() < deadline, f"condition not reached; last stats: {s}"
        await asyncio.sleep(0.01)


async def wait_until(pred: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def accounted(s: dict[str, Any]) -> None:
    assert s["offered"] == sum(s["outcomes"].values()) + s["in_flight"] + s["queued"]
    assert s["outcomes"]["rejected"] == sum(s["rejections"].values())


def gen(tag: str = "", **opts: Any) -> dict[str, Any]:
    return {"model": "fake", "prompt": "hello", "stream": True, "tag": tag, **opts}


async def test_streams_chunk_by_chunk_with_gateway_headers(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url)
    async with (
        httpx.AsyncClient(base_url=gw.url, timeout=10) as c,
        c.stream("POST", "/v1/completions", json=gen(hold_after=1)) as r,
    ):
        assert r.status_code == 200
        assert float(r.headers["x-llmtop-queue-ms"]) == 0.0
        assert float(r.headers["x-llmtop-overhead-ms"]) >= 0.0
        chunks = r.aiter_raw()
        first = await asyncio.wait_for(chunks.__anext__(), 5)
        # the upstream is still holding the rest: the first chunk was not buffered
        assert b'"i": 0' in first
        assert fake.active == 1
        fake.gate.set()
        rest = b"".join([c async for c in chunks])
    assert rest.endswith(b"data: [DONE]\n\n")
    async with httpx.AsyncClient(base_url=gw.url) as c:
        s = await wait_stats(c, lambda s: s["outcomes"]["completed"] == 1)
    assert s["ttft_s"]["p50"] is not None


async def test_every_path_is_forwarded_and_hop_by_hop_headers_dropped(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        models = await c.get("/v1/models")
        echo = await c.post(
            "/echo?x=1",
            content=b"{}",
            headers={
                "authorization": "Bearer key",
                "connection": "keep-alive, x-private",
                "x-private": "hop",
                "x-keep": "end",
            },
        )
        s = await stats(c)
    async with httpx.AsyncClient(base_url=gw.url) as other:
        # another user's request: the gateway must not replay the first one's Set-Cookie
        second = (await other.post("/echo", content=b"{}")).json()
    assert "cookie" not in second
    assert models.json()["data"][0]["id"] == "fake"
    seen = echo.json()
    assert seen["authorization"] == "Bearer key"
    assert seen["x-keep"] == "end"
    assert "x-private" not in seen
    assert echo.headers["x-up"] == "1"
    assert "keep-alive" not in echo.headers
    assert s["offered"] == 0  # non-generation paths skip admission


async def test_queueing_then_429_queue_full_with_retry_after(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=1, max_queue=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        first = asyncio.ensure_future(c.post("/v1/completions", json=gen(hold_after=0)))
        await wait_stats(c, lambda s: s["in_flight"] == 1)
        second = asyncio.ensure_future(c.post("/v1/completions", json=gen()))
        await wait_stats(c, lambda s: s["queued"] == 1)
        third = await c.post("/v1/completions", json=gen())
        assert third.status_code == 429
        assert int(third.headers["retry-after"]) >= 1
        err = third.json()["error"]
        assert err["message"] == "queue full: 1/1 waiting (max_queue)"
        assert err["reason"] == "queue_full"
        fake.gate.set()
        r1, r2 = await asyncio.gather(first, second)
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert (r1.status_code, r2.status_code) == (200, 200)
    assert float(r2.headers["x-llmtop-queue-ms"]) > 0.0
    assert s["outcomes"]["completed"] == 2
    assert s["rejections"]["queue_full"] == 1
    accounted(s)


async def test_priority_order_high_first_fifo_within(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        tasks = [asyncio.ensure_future(c.post("/v1/completions", json=gen("first", hold_after=0)))]
        await wait_stats(c, lambda s: s["in_flight"] == 1)
        for n, (tag, prio) in enumerate(
            [("l1", "low"), ("n1", "normal"), ("h1", "high"), ("l2", "low"), ("h2", "high")]
        ):
            tasks.append(
                asyncio.ensure_future(
                    c.post("/v1/completions", json=gen(tag), headers={"x-llmtop-priority": prio})
                )
            )
            await wait_stats(c, lambda s, n=n: s["queued"] == n + 1)
        s = await stats(c)
        assert s["queued_by_priority"] == {"high": 2, "normal": 1, "low": 2}
        fake.gate.set()
        results = await asyncio.gather(*tasks)
    assert all(r.status_code == 200 for r in results)
    assert fake.arrivals == ["first", "h1", "h2", "n1", "l1", "l2"]


async def test_queue_timeout_is_a_429(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=1, queue_timeout_s=0.3)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        first = asyncio.ensure_future(c.post("/v1/completions", json=gen(hold_after=0)))
        await wait_stats(c, lambda s: s["in_flight"] == 1)
        late = await c.post("/v1/completions", json=gen())
        fake.gate.set()
        await first
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert late.status_code == 429
    assert late.json()["error"]["reason"] == "queue_timeout"
    assert float(late.headers["x-llmtop-queue-ms"]) >= 300.0
    assert int(late.headers["retry-after"]) >= 1
    assert s["outcomes"]["timed_out"] == 1
    assert s["queue_wait_s"]["p95"] >= 0.3
    accounted(s)


async def test_raising_concurrency_live_admits_waiters(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        tasks = [
            asyncio.ensure_future(c.post("/v1/completions", json=gen(hold_after=0)))
            for _ in range(3)
        ]
        await wait_stats(c, lambda s: s["in_flight"] == 1 and s["queued"] == 2)
        r = await c.patch("/admin/limits", json={"max_concurrency": 3})
        assert r.json()["max_concurrency"] == 3
        await wait_stats(c, lambda s: s["in_flight"] == 3 and s["queued"] == 0)
        await wait_until(lambda: fake.active == 3)
        fake.gate.set()
        await asyncio.gather(*tasks)
        events = (await c.get("/admin/events")).json()["events"]
    assert events[-1]["field"] == "max_concurrency"
    assert (events[-1]["old"], events[-1]["new"]) == (1, 3)


async def test_disconnect_while_queued_leaves_the_queue(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        first = asyncio.ensure_future(c.post("/v1/completions", json=gen("a", hold_after=0)))
        await wait_stats(c, lambda s: s["in_flight"] == 1)
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as other:
            queued = asyncio.ensure_future(other.post("/v1/completions", json=gen("b")))
            await wait_stats(c, lambda s: s["queued"] == 1)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
        s = await wait_stats(c, lambda s: s["queued"] == 0)
        assert s["outcomes"]["cancelled"] == 1
        fake.gate.set()
        await first
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert fake.arrivals == ["a"]  # the one that left never reached the upstream
    accounted(s)


async def test_disconnect_while_streaming_closes_upstream_and_frees_slot(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        async with (
            httpx.AsyncClient(base_url=gw.url, timeout=10) as streamer,
            streamer.stream("POST", "/v1/completions", json=gen(hold_after=1)) as r,
        ):
            await asyncio.wait_for(r.aiter_raw().__anext__(), 5)
            await wait_until(lambda: fake.active == 1)
        # leaving the block closed the connection mid-stream
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
        await wait_until(lambda: fake.aborted == 1)
        # the slot is free: the next request goes straight through
        ok = await c.post("/v1/completions", json=gen())
    assert ok.status_code == 200
    assert float(ok.headers["x-llmtop-queue-ms"]) == 0.0
    assert s["outcomes"]["cancelled"] == 1
    accounted(s)


async def test_upstream_refused_is_502_and_counted(
    start_gateway: Callable[..., ServerThread],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    gw = start_gateway(dead)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen())
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    assert s["outcomes"]["upstream_error"] == 1
    assert s["upstream"]["healthy"] is False
    assert "unreachable" in s["upstream"]["last_error"]
    accounted(s)


async def test_upstream_hung_is_504(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url, upstream_read_timeout_s=0.3)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen(hang=True))
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 504
    assert r.json()["error"]["code"] == 504
    assert s["outcomes"]["upstream_error"] == 1


async def test_upstream_5xx_is_an_openai_502(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen(status=500))
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 502
    err = r.json()["error"]
    assert err["upstream_status"] == 500
    assert "boom" in err["message"]
    assert s["outcomes"]["upstream_error"] == 1


async def test_upstream_reset_mid_stream_ends_the_stream_cleanly(
    start_gateway: Callable[..., ServerThread],
) -> None:
    raw = RawUpstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
        b'f\r\ndata: {"i":0}\n\n\r\n'
    )
    try:
        gw = start_gateway(raw.url)
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
            r = await c.post("/v1/completions", json=gen())
            s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    finally:
        raw.close()
    assert r.status_code == 200  # headers were already out
    assert r.text.startswith('data: {"i":0}')
    assert '"type": "upstream_error"' in r.text
    assert r.text.endswith("data: [DONE]\n\n")
    assert s["outcomes"]["upstream_error"] == 1
    accounted(s)


async def test_upstream_garbage_is_502(start_gateway: Callable[..., ServerThread]) -> None:
    raw = RawUpstream(b"this is not http\r\n\r\n")
    try:
        gw = start_gateway(raw.url)
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
            r = await c.post("/v1/completions", json=gen())
    finally:
        raw.close()
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"


async def test_rate_limit_per_tenant(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url, rate_limit_rpm=6.0)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        a1 = await c.post("/v1/completions", json=gen(), headers={"x-llmtop-tenant": "a"})
        a2 = await c.post("/v1/completions", json=gen(), headers={"x-llmtop-tenant": "a"})
        k1 = await c.post("/v1/completions", json=gen(), headers={"authorization": "Bearer k"})
        k2 = await c.post("/v1/completions", json=gen(), headers={"authorization": "Bearer k"})
        s = await stats(c)
    assert (a1.status_code, a2.status_code, k1.status_code, k2.status_code) == (200, 429, 200, 429)
    assert a2.json()["error"]["reason"] == "rate_limited"
    assert int(a2.headers["retry-after"]) >= 1
    assert s["rejections"]["rate_limited"] == 2


async def test_burst_accounting_returns_to_zero(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, max_concurrency=2, max_queue=4)
    prios = ["high", "normal", "low"]
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        burst = [
            c.post(
                "/v1/completions",
                json=gen(str(i), hold_after=0),
                headers={"x-llmtop-priority": prios[i % 3]},
            )
            for i in range(30)
        ]
        tasks = [asyncio.ensure_future(b) for b in burst]
        await wait_stats(c, lambda s: s["in_flight"] == 2 and s["queued"] == 4)
        fake.gate.set()
        results = await asyncio.gather(*tasks)
        s = await wait_stats(c, lambda s: s["in_flight"] == 0 and s["queued"] == 0)
    codes = [r.status_code for r in results]
    assert set(codes) <= {200, 429}
    assert s["offered"] == 30
    assert s["outcomes"]["completed"] == codes.count(200) == len(fake.arrivals)
    assert s["outcomes"]["rejected"] == codes.count(429)
    assert s["in_flight_prompt_tokens"] == 0
    accounted(s)


async def test_pause_holds_the_queue_and_shrinking_it_sheds(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    fake.gate.set()
    gw = start_gateway(url, max_concurrency=4, max_queue=10)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        assert (await c.post("/admin/pause")).json() == {"paused": True}
        high = asyncio.ensure_future(
            c.post("/v1/completions", json=gen("h"), headers={"x-llmtop-priority": "high"})
        )
        lows = [
            asyncio.ensure_future(
                c.post("/v1/completions", json=gen(f"l{i}"), headers={"x-llmtop-priority": "low"})
            )
            for i in range(3)
        ]
        s = await wait_stats(c, lambda s: s["queued"] == 4)
        assert s["in_flight"] == 0
        assert s["paused"] is True
        await c.patch("/admin/limits", json={"max_queue": 2})
        s = await wait_stats(c, lambda s: s["queued"] == 2)
        assert s["queued_by_priority"] == {"high": 1, "normal": 0, "low": 1}
        await c.post("/admin/resume")
        results = await asyncio.gather(high, *lows)
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
        events = (await c.get("/admin/events")).json()["events"]
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 200, 429, 429]
    shed = [r.json()["error"] for r in results if r.status_code == 429]
    assert {e["reason"] for e in shed} == {"shed"}
    assert results[0].status_code == 200  # the high-priority waiter was never shed
    assert fake.arrivals[0] == "h"
    assert [e["field"] for e in events] == ["paused", "max_queue", "paused"]
    assert s["rejections"]["shed"] == 2
    accounted(s)
