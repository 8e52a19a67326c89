"""RedisLimits against a real redis-server: grants never sum past the cap, fair shares, a dead
gateway's lease returns within the TTL, limits follow, and the fallback when Redis goes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, cast

import httpx
import redis.asyncio as aioredis

from harness.redis_server import redis_server
from llmtop.gateway.admission.controller import AdmissionController, Limits
from llmtop.gateway.upstreams.shared import RedisLimits

Gateway = tuple[AdmissionController, RedisLimits, Callable[[], None]]


def gateway(url: str, ttl_s: float = 1.0) -> Gateway:
    ctl = AdmissionController(Limits(max_concurrency=6, max_queue=50, queue_timeout_s=30.0))
    shared = RedisLimits(url, prefix="t:", ttl_s=ttl_s)

    def apply() -> None:
        ctl.set_share(shared.slots, shared.kv_blocks)

    apply()  # as the app does: no room before Redis grants it
    return ctl, shared, apply


async def until(
    cond: Callable[[], bool], timeout_s: float = 5.0, state: Callable[[], str] = str
) -> None:
    """Wait for `cond`; on a timeout say `state()` (what the next look at a flake needs)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, f"not met in time: {state()}"
        await asyncio.sleep(0.01)


def _state(gws: list[Gateway]) -> str:
    return "; ".join(
        f"{s.id}: in flight {c.in_flight}, queued {c.queued}, slots {s.slots}, live {s.live},"
        f" connected {s.connected}, fallbacks {s.fallbacks}, error {s.last_error}"
        for c, s, _ in gws
    )


async def test_grants_share_the_cap_and_a_dead_lease_returns() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with redis_server() as server:
        gws = [gateway(server.url) for _ in range(3)]
        tasks = [asyncio.ensure_future(s.run(c, a)) for c, s, a in gws]
        try:
            tickets = [[c.enter() for _ in range(5)] for c, _, _ in gws]  # 15 wanted, cap 6
            await until(lambda: sum(c.in_flight for c, _, _ in gws) == 6)
            served = [0, 0, 0]
            for _ in range(60):  # churn: each round one request ends on each gateway
                for i, (c, _, _) in enumerate(gws):
                    done = next((t for t in tickets[i] if t.admitted and not t.queued), None)
                    if done is not None and c.in_flight:
                        done.release()
                        tickets[i].remove(done)
                        tickets[i].append(c.enter())
                        served[i] += 1
                await asyncio.sleep(0.01)
                assert sum(c.in_flight for c, _, _ in gws) <= 6
            assert min(served) > 5, served  # no gateway starves while the others hold room
            # gateway 0 dies without a word: its 2 slots come back once its lease's TTL (1 s
            # from its last renewal) has run out, judged on Redis's clock; the wait is only a
            # guard, since a starved test loop or redis-server may take longer to see it
            r = aioredis.Redis.from_url(server.url)
            tasks[0].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[0]
            died_s, died_us = await r.time()
            # its last renewal + the TTL (None: a starved moment let it run out and a sync drop it)
            expiry_ms = await r.zscore("t:lease_expiry", gws[0][1].id)
            if expiry_ms is not None:
                assert expiry_ms <= died_s * 1000 + died_us / 1000 + 1001
            await until(
                lambda: gws[1][0].in_flight + gws[2][0].in_flight == 6,
                30.0,
                lambda: f"{_state(gws)} (since the start {loop.time() - started:.1f} s)",
            )
            back_s, back_us = await r.time()
            if expiry_ms is not None:
                assert back_s * 1000 + back_us / 1000 >= expiry_ms  # not before it ran out
            assert await r.hexists("t:leases", gws[0][1].id) == 0
            await r.aclose()
            assert gws[1][1].live == 2
            for ts in tickets[1:]:
                for t in ts:
                    if t.admitted:
                        t.release()
            await until(lambda: all(t.admitted for ts in tickets[1:] for t in ts))
            for ts in tickets:
                for t in ts:
                    t.release()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=10)  # as the app's lifespan: stopped, then closed
            for _, s, _ in gws:
                await s.close()


async def test_a_limit_set_on_one_gateway_reaches_the_others() -> None:
    with redis_server() as server:
        (c1, s1, a1), (c2, s2, a2) = gateway(server.url), gateway(server.url)
        tasks = [asyncio.ensure_future(s1.run(c1, a1)), asyncio.ensure_future(s2.run(c2, a2))]
        try:
            await until(lambda: s1.connected is True and s2.connected is True)
            c1.set_limits({"max_concurrency": 3, "max_queue": 7})
            c1.set_paused(True)
            await s1.publish(c1)
            await until(lambda: c2.limits.max_queue == 7 and c2.paused)
            assert c2.limits.max_concurrency == 3
            assert c2.events[-1]["source"] == "redis"
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=10)
            await s1.close()
            await s2.close()


async def test_redis_gone_falls_back_to_a_share_and_rejoins() -> None:
    with redis_server() as server:
        gws = [gateway(server.url) for _ in range(3)]
        tasks = [asyncio.ensure_future(s.run(c, a)) for c, s, a in gws]
        try:
            c, s, _ = gws[0]
            await until(lambda: all(g[1].live == 3 for g in gws))
            server.kill()
            tickets = [c.enter() for _ in range(4)]
            await until(lambda: s.connected is False)
            t_down = asyncio.get_running_loop().time()
            assert s.status()["status"] == "fallback"
            assert s.slots == 0  # it held nothing: the others may hold all 6 (fallback.py)
            assert c.in_flight == 0
            assert "redis unreachable" in (s.last_error or "")
            await until(lambda: s.slots == 2, 5.0)  # its share, once one TTL has passed
            assert asyncio.get_running_loop().time() - t_down >= 0.9  # the TTL, less the poll
            await until(lambda: c.in_flight == 2)
            server.start()
            await until(lambda: s.connected is True, 5.0)
            assert s.status()["status"] == "ok"
            for t in tickets:
                if t.admitted:
                    t.release()
            await until(lambda: all(t.admitted for t in tickets))
            for t in tickets:
                t.release()
            assert c.offered == sum(c.outcomes.values()) + c.in_flight + c.queued
            r = aioredis.Redis.from_url(server.url)
            await until(lambda: c.in_flight == 0)
            await r.aclose()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=10)
            for _, s_, _ in gws:
                await s_.close()


async def test_two_gateway_apps_share_the_rate_limit_and_the_limits(
    start_sim: Any, start_gateway: Any
) -> None:
    """Through the apps: a tenant's rate counts across gateways, an admin change on one
    reaches the other, and the stats say where the limits live."""
    with redis_server() as server:
        sim = start_sim(profile="fast")
        kw = {"redis_url": server.url, "rate_limit_rpm": 60.0, "trust_client_headers": True}
        g1, g2 = start_gateway(sim.url, **kw), start_gateway(sim.url, **kw)
        body = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": 1}
        head = {"x-llmtop-tenant": "acme"}
        async with httpx.AsyncClient(timeout=10) as c:
            first = await c.post(f"{g1.url}/v1/completions", json=body, headers=head)
            second = await c.post(f"{g2.url}/v1/completions", json=body, headers=head)
            other = await c.post(f"{g2.url}/v1/completions", json=body)
            assert first.status_code == 200
            assert second.status_code == 429  # 60/min is one a second, for all gateways
            assert "all gateways" in second.json()["error"]["message"]
            assert other.status_code == 200  # another tenant has its own bucket
            r = await c.patch(f"{g1.url}/admin/limits", json={"max_queue": 9})
            assert r.status_code == 200

            async def followed() -> bool:
                doc: dict[str, Any] = (await c.get(f"{g2.url}/admin/limits")).json()
                return bool(doc["max_queue"] == 9)

            deadline = asyncio.get_running_loop().time() + 3
            while not await followed():
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
            s2 = (await c.get(f"{g2.url}/admin/stats")).json()
        assert s2["shared"]["backend"] == "redis"
        assert s2["shared"]["status"] == "ok"
        assert s2["shared"]["live_gateways"] == 2
        assert s2["rejections"]["rate_limited"] == 1
        assert s2["offered"] == sum(s2["outcomes"].values()) + s2["in_flight"] + s2["queued"]


async def test_the_fallback_learns_each_request_life_and_keeps_none_that_ended(
    start_sim: Any, serve_app: Any
) -> None:
    """The proxy tells the shared limits of each admitted request and its end, whatever the
    end (served, the client gone mid-stream): what the fallback's rise waits on."""
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings

    with redis_server() as server:
        sim = start_sim(profile="fast")
        app = create_app(GatewaySettings(upstream=sim.url, redis_url=server.url))
        gw = serve_app(app)
        shared = app.state.gateway.shared
        assert isinstance(shared, RedisLimits)
        body = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": 4}
        async with httpx.AsyncClient(timeout=10) as c:
            for _ in range(3):
                assert (await c.post(f"{gw.url}/v1/completions", json=body)).status_code == 200
            long = {**body, "max_tokens": 2000, "stream": True}
            async with c.stream("POST", f"{gw.url}/v1/completions", json=long) as r:
                async for _ in r.aiter_bytes():
                    assert shared.lives.oldest_admitted() is not None  # in flight now
                    break  # the client leaves mid-stream

            async def idle() -> bool:
                doc: dict[str, Any] = (await c.get(f"{gw.url}/admin/stats")).json()
                return bool(doc["in_flight"] == 0)

            deadline = asyncio.get_running_loop().time() + 5
            while not await idle():
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
        now = app.state.gateway.admission.now()
        assert shared.lives.oldest_admitted() is None  # every end was told
        assert 0.0 < shared.lives.longest_s(now) < 5.0


OLD_PATTERN = "return {string.match(ARGV[1], '(%d+) (%d+) (%d+) (%d+)')}"
"""The record pattern of a gateway from before the draining field (its SYNC_LUA's)."""


async def test_a_draining_gateway_says_so_and_old_records_mix_with_new() -> None:
    with redis_server() as server:
        (c1, s1, a1), (c2, s2, a2) = gateway(server.url), gateway(server.url)
        tasks = [asyncio.ensure_future(s1.run(c1, a1)), asyncio.ensure_future(s2.run(c2, a2))]
        r = aioredis.Redis.from_url(server.url, decode_responses=True)
        try:
            await until(lambda: s1.live == 2 and s2.live == 2)
            assert (s1.draining_peers, s2.draining_peers) == (0, 0)
            # an older gateway's record (four fields, no draining flag): live, not draining
            await r.hset("t:leases", "old", "0 0 0 0")
            await r.zadd("t:lease_expiry", {"old": 2**52})
            await until(lambda: s2.live == 3)
            assert s2.draining_peers == 0
            s1.begin_drain()
            await until(lambda: s2.draining_peers == 1)
            assert s1.draining_peers == 0  # it does not count itself
            assert s2.status()["draining_gateways"] == 1
            # str: decode_responses=True (redis-py's types say bytes whatever the client)
            record = cast("str | None", await r.hget("t:leases", s1.id))
            assert record is not None
            assert record.endswith(" 1")
            # the older gateway reads the new five-field record's first four, as before
            fields = await r.eval(OLD_PATTERN, 0, record)
            assert fields == record.split()[:4]
            t = c1.enter()  # it still renews and grants while it drains
            await until(lambda: t.admitted)
            t.release()
            tasks[0].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[0]
            await s1.close()  # its lease given back as it stops
            await until(lambda: s2.live == 2 and s2.draining_peers == 0)
            server.kill()
            await until(lambda: s2.connected is False)
            assert s2.status()["draining_gateways"] is None  # unknown, not 0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=10)
            await r.aclose()
            await s2.close()
