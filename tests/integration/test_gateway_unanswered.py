"""The gateway shows the age of a request stuck before its first token, while it is stuck."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.gateway_fakes import wait_stats
from tests.support.gateway_sim import Start


async def test_oldest_queued_and_unanswered_ages(start_gateway: Start, serve_app: Start) -> None:
    release = threading.Event()

    async def completions(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            # the engine holds the request before its first token (a thread's event: the
            # server runs on its own loop in another thread)
            await asyncio.to_thread(release.wait, 30)
            yield b'data: {"choices": [{"text": "hi"}]}\n\ndata: [DONE]\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream = serve_app(
        Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    )
    gw = start_gateway(upstream.url, max_concurrency=1, max_queue=8)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        idle = (await c.get("/admin/stats")).json()
        assert (idle["oldest_queued_s"], idle["oldest_unanswered_s"]) == (None, None)
        tasks = [
            asyncio.ensure_future(c.post("/v1/completions", json={"prompt": "x", "stream": True}))
            for _ in range(2)
        ]
        await wait_stats(c, lambda s: s["in_flight"] == 1 and s["queued"] == 1)
        await asyncio.sleep(0.5)
        stuck = (await c.get("/admin/stats")).json()
        metrics = (await c.get("/metrics")).text
        release.set()
        results = await asyncio.gather(*tasks)
        done = await wait_stats(c, lambda s: s["in_flight"] == 0 and s["queued"] == 0)
    assert stuck["oldest_unanswered_s"] >= 0.5
    assert stuck["oldest_queued_s"] >= 0.5
    gauge = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("llmtop_gateway_oldest_unanswered_seconds ")
    )
    assert gauge >= 0.5
    assert all(r.status_code == 200 for r in results)
    assert (done["oldest_queued_s"], done["oldest_unanswered_s"]) == (None, None)


async def test_time_queued_in_the_gateway_is_not_counted_as_the_engines(
    start_gateway: Start, serve_app: Start
) -> None:
    """A capped gateway queues by design: once a request reaches the engine, its unanswered age
    starts at its admission, so degraded-200 does not fire on the gateway's own queue."""
    holds = [threading.Event(), threading.Event()]
    seen = iter(range(2))

    async def completions(request: Request) -> StreamingResponse:
        hold = holds[next(seen)]

        async def body() -> AsyncIterator[bytes]:
            await asyncio.to_thread(hold.wait, 30)
            yield b'data: {"choices": [{"text": "hi"}]}\n\ndata: [DONE]\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream = serve_app(
        Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    )
    gw = start_gateway(upstream.url, max_concurrency=1, max_queue=8)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        tasks = [
            asyncio.ensure_future(c.post("/v1/completions", json={"prompt": "x", "stream": True}))
            for _ in range(2)
        ]
        await wait_stats(c, lambda s: s["in_flight"] == 1 and s["queued"] == 1)
        await asyncio.sleep(1.5)  # the second waits 1.5 s in the gateway's queue
        holds[0].set()  # the first answers; the second goes to the engine, which holds it
        # admitted, and handed to the upstream (the age moves from the queue to the engine)
        moved = await wait_stats(c, lambda s: s["in_flight"] == 1 and s["oldest_queued_s"] is None)
        holds[1].set()
        await asyncio.gather(*tasks)
    assert moved["queued"] == 0
    assert moved["oldest_unanswered_s"] is not None
    assert moved["oldest_unanswered_s"] < 1.0  # not the 1.5 s it spent queued
