"""The gateway over real sockets against a purpose-built upstream: streaming, headers,
queueing, 429s, priority, timeouts, live limits, disconnects, rate limits and the accounting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.gateway_fakes import (
    FakeUpstream,
    accounted,
    fake_upstream,
    gen,
    stats,
    wait_stats,
    wait_until,
)


@pytest.fixture
def upstream(serve_app: Callable[[Any], ServerThread]) -> Iterator[tuple[FakeUpstream, str]]:
    yield from fake_upstream(serve_app)


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
        assert float(r.headers["x-llmtop-handler-to-headers-ms"]) >= 0.0
        assert r.headers["x-llmtop-priority"] == "normal"
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
    gw = start_gateway(url, max_concurrency=1, trust_client_headers=True)
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

            def queued(s: dict[str, Any], want: int = n + 1) -> bool:
                return bool(s["queued"] == want)

            await wait_stats(c, queued)
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


async def test_client_leaving_after_done_is_completed_not_cancelled(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    """A client that stops at `data: [DONE]` (llmtop load, the OpenAI SDK) got the whole
    answer: when the upstream's body ends a moment later (vLLM's does), that is completed."""
    _, url = upstream
    gw = start_gateway(url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        async with (
            httpx.AsyncClient(base_url=gw.url, timeout=10) as streamer,
            streamer.stream("POST", "/v1/completions", json=gen(linger_s=1.0)) as r,
        ):
            seen = b""
            async for chunk in r.aiter_raw():
                seen += chunk
                if b"data: [DONE]" in seen:
                    break
        # leaving the block closed the connection while the upstream lingers
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert s["outcomes"]["completed"] == 1
    assert s["outcomes"]["cancelled"] == 0
    accounted(s)


async def test_done_split_over_two_reads_still_counts_the_stream_completed(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    """`data: [DONE]` cut between two reads is still seen: the client that leaves right
    after it got the whole answer."""
    _, url = upstream
    gw = start_gateway(url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        async with (
            httpx.AsyncClient(base_url=gw.url, timeout=10) as streamer,
            streamer.stream(
                "POST", "/v1/completions", json=gen(split_done=True, linger_s=1.0)
            ) as r,
        ):
            seen = b""
            async for chunk in r.aiter_raw():
                seen += chunk
                if b"data: [DONE]" in seen:
                    break
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert s["outcomes"]["completed"] == 1
    assert s["outcomes"]["cancelled"] == 0
    accounted(s)


async def test_rate_limit_per_tenant(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url, rate_limit_rpm=6.0, trust_client_headers=True)
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
    gw = start_gateway(url, max_concurrency=2, max_queue=4, trust_client_headers=True)
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
    gw = start_gateway(url, max_concurrency=4, max_queue=10, trust_client_headers=True)
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


async def test_handler_time_leaves_out_the_upstream(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url)
    think_s = 0.05  # before the headers and before each of 3 chunks: 0.2 s of upstream time
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        t0 = asyncio.get_running_loop().time()
        r = await c.post("/v1/completions", json=gen(think_s=think_s))
        e2e = asyncio.get_running_loop().time() - t0
        s = await wait_stats(c, lambda s: s["handler_s"]["p50"] is not None)
        metrics = (await c.get("/metrics")).text
    assert r.status_code == 200
    assert e2e >= 4 * think_s
    to_headers = float(r.headers["x-llmtop-handler-to-headers-ms"]) / 1000.0
    whole = s["handler_s"]["p50"]
    # the handler's own time is there, and none of the upstream's pauses is in it
    assert 0.0 < to_headers <= whole < think_s
    assert "llmtop_gateway_handler_seconds_count 1.0" in metrics
