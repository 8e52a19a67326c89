"""The gateway over several `llmtop sim` replicas on real sockets: spread, a refused connection
retried once elsewhere, ejection and return after a /health probe, per-replica limits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.serve.stack import free_port
from tests.support.gateway_sim import accounted, engine_of, reached, wait_for

Start = Callable[..., ServerThread]
BODY = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 4}


def replicas(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["url"]: r for r in stats["replicas"]}


async def test_spread_and_a_refused_connection_goes_elsewhere(
    start_sim: Start, start_gateway: Start
) -> None:
    a, b = start_sim(profile="fast"), start_sim(profile="fast")
    dead = f"http://127.0.0.1:{free_port()}"  # nobody listens: connect refused
    gw = start_gateway(f"{a.url},{dead},{b.url}", eject_s=30.0)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        answers = await asyncio.gather(*(c.post("/v1/completions", json=BODY) for _ in range(12)))
        assert [r.status_code for r in answers] == [200] * 12  # the dead one cost no request
        s = (await c.get("/admin/stats")).json()
    accounted(s)
    assert s["outcomes"]["completed"] == 12
    reps = replicas(s)
    assert reps[dead]["state"] == "ejected"
    failures = reps[dead]["failures"]  # those picked at once, before the first refusal
    assert failures >= 1
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        more = await asyncio.gather(*(c.post("/v1/completions", json=BODY) for _ in range(6)))
        assert [r.status_code for r in more] == [200] * 6
        s = (await c.get("/admin/stats")).json()
    assert replicas(s)[dead]["failures"] == failures  # ejected: not tried again for eject_s
    # refused on traffic ("upstream unreachable") or by the rotation's /health check, first
    assert reps[dead]["last_error"].endswith("unreachable: ConnectError")
    assert reached(engine_of(a)) > 0
    assert reached(engine_of(b)) > 0
    assert reached(engine_of(a)) + reached(engine_of(b)) == 18


async def test_ejected_replica_returns_after_its_health_probe(
    start_sim: Start, start_gateway: Start, serve_app: Callable[[Any], ServerThread]
) -> None:
    a = start_sim(profile="fast")
    b = start_sim(profile="fast")
    gw = start_gateway(f"{a.url},{b.url}", eject_s=2.0)
    app: Any = gw._server.config.app
    state = app.state.gateway
    rb = state.balancer.replicas[1]
    state.balancer.fail(rb, "upstream returned 503")  # as the proxy does on a 5xx
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        while_ejected = 0
        for _ in range(4):
            assert (await c.post("/v1/completions", json=BODY)).status_code == 200
            if rb.state != "ok":  # still ejected once answered: it was routed while ejected
                while_ejected += 1
                assert reached(engine_of(b)) == 0  # ejected: no traffic
        assert while_ejected > 0  # the check above ran (a busy machine may take eject_s)
        await wait_for(lambda: rb.state == "ok", 10.0)  # eject_s over, /health answered
        for _ in range(4):
            assert (await c.post("/v1/completions", json=BODY)).status_code == 200
        assert reached(engine_of(b)) > 0
        accounted((await c.get("/admin/stats")).json())


async def test_per_replica_limit_bounds_each_engine(start_sim: Start, start_gateway: Start) -> None:
    a, b = start_sim(profile="fast"), start_sim(profile="fast")
    gw = start_gateway(f"{a.url},{b.url}", max_concurrency=8, replica_max_concurrency=2)
    ea, eb = engine_of(a), engine_of(b)
    peak = [0, 0]
    stop = False

    async def watch() -> None:
        while not stop:
            peak[0] = max(peak[0], len(ea.running) + len(ea.waiting))
            peak[1] = max(peak[1], len(eb.running) + len(eb.waiting))
            await asyncio.sleep(0.002)

    watcher = asyncio.ensure_future(watch())
    body = {**BODY, "max_tokens": 40}
    async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
        answers = await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(12)))
        s = (await c.get("/admin/stats")).json()
    stop = True
    await watcher
    assert [r.status_code for r in answers] == [200] * 12
    assert max(peak) <= 2
    assert s["share_slots"] == 4  # two live replicas of two each
    accounted(s)
