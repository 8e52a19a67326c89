"""The gateway in front of `llmtop sim` over real sockets: bounded concurrency at the engine,
priority, live limits, the token budget, and disconnects that abort the engine's request."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.gateway_fakes import wait_stats
from tests.support.gateway_sim import (
    Start,
    accounted,
    at_engine,
    body,
    engine_of,
    reached,
    wait_for,
)


async def test_engine_never_sees_more_than_max_concurrency(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast", max_num_seqs=8)
    engine = engine_of(sim)
    gw = start_gateway(sim.url, max_concurrency=2, max_queue=16)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, at_engine(engine))
            await asyncio.sleep(0.002)

    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        watcher = asyncio.ensure_future(watch())
        tasks = [asyncio.ensure_future(c.post("/v1/completions", json=body(40))) for _ in range(6)]
        seen = await wait_stats(c, lambda s: s["queued"] >= 1)
        results = await asyncio.gather(*tasks)
        watcher.cancel()
        s = await wait_stats(c, lambda s: s["in_flight"] == 0 and s["queued"] == 0)
    assert seen["in_flight"] == 2
    assert all(r.status_code == 200 for r in results)
    assert all(r.text.rstrip().endswith("data: [DONE]") for r in results)
    assert 1 <= peak <= 2
    assert s["outcomes"]["completed"] == 6
    assert s["ttft_s"]["p95"] is not None
    assert s["queue_wait_s"]["p95"] > 0
    accounted(s)


async def test_high_priority_waits_less_than_low(start_sim: Start, start_gateway: Start) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url, max_concurrency=1, trust_client_headers=True)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        first = asyncio.ensure_future(c.post("/v1/completions", json=body(120)))
        await wait_stats(c, lambda s: s["in_flight"] == 1)
        low = asyncio.ensure_future(
            c.post("/v1/completions", json=body(10), headers={"x-llmtop-priority": "low"})
        )
        await wait_stats(c, lambda s: s["queued"] == 1)
        high = asyncio.ensure_future(
            c.post("/v1/completions", json=body(10), headers={"x-llmtop-priority": "high"})
        )
        await wait_stats(c, lambda s: s["queued"] == 2)
        r0, rl, rh = await asyncio.gather(first, low, high)
    assert (r0.status_code, rl.status_code, rh.status_code) == (200, 200, 200)
    # high arrived later but went first: the low one also waited for the high one
    assert float(rh.headers["x-llmtop-queue-ms"]) < float(rl.headers["x-llmtop-queue-ms"])


async def test_live_concurrency_change_reaches_the_engine(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast", max_num_seqs=8)
    engine = engine_of(sim)
    gw = start_gateway(sim.url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        tasks = [asyncio.ensure_future(c.post("/v1/completions", json=body(400))) for _ in range(4)]
        await wait_stats(c, lambda s: s["queued"] == 3)
        assert at_engine(engine) == 1
        r = await c.patch(
            "/admin/limits", json={"max_concurrency": 4}, headers={"x-llmtop-source": "test"}
        )
        assert r.status_code == 200
        await wait_for(lambda: at_engine(engine) == 4)
        r = await c.patch("/admin/limits", json={"max_concurrency": 1})
        results = await asyncio.gather(*tasks)
        events = (await c.get("/admin/events")).json()["events"]
    assert all(x.status_code == 200 for x in results)
    assert [(e["old"], e["new"], e["source"]) for e in events] == [
        (1, 4, "test"),
        (4, 1, "admin"),
    ]


async def test_disconnect_while_streaming_aborts_the_engine_request(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast")
    engine = engine_of(sim)
    gw = start_gateway(sim.url, max_concurrency=1)
    async with (
        httpx.AsyncClient(base_url=gw.url, timeout=30) as streamer,
        streamer.stream("POST", "/v1/completions", json=body(1500)) as r,
    ):
        got = 0
        async for _ in r.aiter_raw():
            got += 1
            if got >= 3:
                break
        assert at_engine(engine) == 1
    await wait_for(lambda: engine.stats.finished["abort"] == 1)
    await wait_for(lambda: engine.free_blocks == engine.config.num_gpu_blocks)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
        ok = await c.post("/v1/completions", json=body(5))
    assert s["outcomes"]["cancelled"] == 1
    assert ok.status_code == 200
    assert float(ok.headers["x-llmtop-queue-ms"]) == 0.0


async def test_disconnect_while_queued_never_reaches_the_engine(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast")
    engine = engine_of(sim)
    gw = start_gateway(sim.url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        # ~3 s holding the one slot: long enough that, on busy cores, the cancel lands while
        # the second still waits (200 tokens, ~1 s, sometimes let it through first)
        first = asyncio.ensure_future(c.post("/v1/completions", json=body(500)))
        await wait_stats(c, lambda s: s["in_flight"] == 1)
        async with httpx.AsyncClient(base_url=gw.url, timeout=30) as other:
            queued = asyncio.ensure_future(other.post("/v1/completions", json=body(5)))
            await wait_stats(c, lambda s: s["queued"] == 1)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
        s = await wait_stats(c, lambda s: s["queued"] == 0)
        assert s["outcomes"]["cancelled"] == 1
        assert (await first).status_code == 200
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert reached(engine) == 1
    accounted(s)


async def test_token_budget_weighs_long_prompts(start_sim: Start, start_gateway: Start) -> None:
    sim = start_sim(profile="fast", max_num_seqs=8)
    engine = engine_of(sim)
    gw = start_gateway(sim.url, max_concurrency=8, max_inflight_prompt_tokens=1000)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, at_engine(engine))
            await asyncio.sleep(0.002)

    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        watcher = asyncio.ensure_future(watch())
        long = [
            asyncio.ensure_future(c.post("/v1/completions", json=body(20, prompt=[7] * 600)))
            for _ in range(3)
        ]
        s = await wait_stats(c, lambda s: s["queued"] == 2)
        assert s["in_flight_prompt_tokens"] == 600
        results = await asyncio.gather(*long)
        watcher.cancel()
        short = await asyncio.gather(
            *(c.post("/v1/completions", json=body(5, prompt=[7] * 50)) for _ in range(8))
        )
    assert all(r.status_code == 200 for r in [*results, *short])
    assert peak == 1  # two 600-token prompts never shared the 1,000-token budget
