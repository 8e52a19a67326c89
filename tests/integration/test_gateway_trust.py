"""Who may claim priority and tenant, over real sockets: the gateway in front of `llmtop sim`.

By default a client's x-llmtop-priority is clamped to its key's highest ("normal" for a key not
in the table) and its x-llmtop-tenant is ignored; with trust_client_headers both are taken as
sent. Priority is read where admission put it (queued_by_priority while paused, then the order
the queue let them go); tenant where it matters, the rate limit's buckets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.gateway.admission.callers import hash_key
from llmtop.tenants import ApiKey
from tests.support.gateway_fakes import accounted, wait_stats
from tests.support.gateway_sim import body

Start = Callable[..., ServerThread]
TEAM_A = "sk-team-a-0001"
TEAM_A_2 = "sk-team-a-0002"
BATCH = "sk-batch-0001"
KEYS = (
    ApiKey(hash_key(TEAM_A), "team-a", "high"),
    ApiKey(hash_key(TEAM_A_2), "team-a", "high"),
    ApiKey(hash_key(BATCH), "batch", "low"),
)


def auth(key: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **extra}


async def queue_two_then_run(
    c: httpx.AsyncClient, first: dict[str, str], second: dict[str, str]
) -> tuple[dict[str, Any], list[str], httpx.Response, httpx.Response]:
    """Pause, queue `first` then `second`, read the queue, resume: the queue as admission
    held it, the order the two finished in (one slot: the order they left the queue), and
    both answers."""
    finished: list[str] = []

    async def post(name: str, headers: dict[str, str]) -> httpx.Response:
        r = await c.post("/v1/completions", json=body(8), headers=headers)
        finished.append(name)
        return r

    await c.post("/admin/pause")
    a = asyncio.ensure_future(post("first", first))
    await wait_stats(c, lambda s: s["queued"] == 1)
    b = asyncio.ensure_future(post("second", second))
    queued = await wait_stats(c, lambda s: s["queued"] == 2)
    await c.post("/admin/resume")
    ra, rb = await asyncio.gather(a, b)
    assert (ra.status_code, rb.status_code) == (200, 200), (ra.text, rb.text)
    return queued, finished, ra, rb


async def test_priority_header_is_ignored_by_default(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url, max_concurrency=1)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        queued, order, _, claimed = await queue_two_then_run(
            c, {}, {"x-llmtop-priority": "high", "authorization": "Bearer sk-unknown"}
        )
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
        metrics = (await c.get("/metrics")).text
    assert queued["queued_by_priority"] == {"high": 0, "normal": 2, "low": 0}
    assert claimed.headers["x-llmtop-priority"] == "normal"
    assert order == ["first", "second"]  # first come, first served: the claim jumped nobody
    assert "llmtop_gateway_priority_clamped_total 1.0" in metrics
    accounted(s)


async def test_priority_header_is_honoured_when_trusted(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url, max_concurrency=1, trust_client_headers=True)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        queued, order, _, high = await queue_two_then_run(c, {}, {"x-llmtop-priority": "high"})
    assert queued["queued_by_priority"] == {"high": 1, "normal": 1, "low": 0}
    assert high.headers["x-llmtop-priority"] == "high"
    assert order == ["second", "first"]


async def test_key_table_sets_the_highest_priority(start_sim: Start, start_gateway: Start) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url, max_concurrency=1, api_keys=KEYS)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        # batch may claim at most low: its "high" runs at low, behind a plain request
        queued, order, _, batch = await queue_two_then_run(
            c, {}, auth(BATCH, **{"x-llmtop-priority": "high"})
        )
        assert queued["queued_by_priority"] == {"high": 0, "normal": 1, "low": 1}
        assert batch.headers["x-llmtop-priority"] == "low"
        assert order == ["first", "second"]
        # team-a may claim high, and jumps ahead of a plain request that came first
        queued, order, _, team = await queue_two_then_run(
            c, {}, auth(TEAM_A, **{"x-llmtop-priority": "high"})
        )
        assert queued["queued_by_priority"] == {"high": 1, "normal": 1, "low": 0}
        assert team.headers["x-llmtop-priority"] == "high"
        assert order == ["second", "first"]
        # without the header a key runs at normal, and may always ask for less
        lower = await c.post(
            "/v1/completions", json=body(2), headers=auth(TEAM_A, **{"x-llmtop-priority": "low"})
        )
        default = await c.post("/v1/completions", json=body(2), headers=auth(TEAM_A))
        metrics = (await c.get("/metrics")).text
    assert lower.headers["x-llmtop-priority"] == "low"
    assert default.headers["x-llmtop-priority"] == "normal"
    assert "llmtop_gateway_priority_clamped_total 1.0" in metrics


async def test_rate_limit_is_per_key_not_per_header(start_sim: Start, start_gateway: Start) -> None:
    sim = start_sim(profile="fast")
    # 1 rpm: each tenant's bucket holds one request, and the next is a minute away
    gw = start_gateway(sim.url, rate_limit_rpm=1.0, api_keys=KEYS)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:

        async def post(headers: dict[str, str]) -> int:
            r = await c.post("/v1/completions", json=body(2), headers=headers)
            return r.status_code

        # one unknown key rotating x-llmtop-tenant: one bucket all the same
        rotated = [await post(auth("sk-unknown", **{"x-llmtop-tenant": f"t{i}"})) for i in range(3)]
        # no key at all: the shared anonymous bucket, whatever the header says
        anonymous = [await post({"x-llmtop-tenant": f"a{i}"}) for i in range(2)]
        # two keys of one tenant share its bucket; another tenant has its own
        team = [await post(auth(TEAM_A)), await post(auth(TEAM_A_2))]
        batch = await post(auth(BATCH))
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert rotated == [200, 429, 429]
    assert anonymous == [200, 429]
    assert team == [200, 429]
    assert batch == 200
    assert s["rejections"]["rate_limited"] == 4
    accounted(s)


async def test_tenant_header_is_honoured_when_trusted(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url, rate_limit_rpm=1.0, trust_client_headers=True, api_keys=KEYS)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        codes = [
            (await c.post("/v1/completions", json=body(2), headers=h)).status_code
            for h in (
                {"x-llmtop-tenant": "t1"},
                {"x-llmtop-tenant": "t2"},
                {"x-llmtop-tenant": "t1"},
                auth(TEAM_A),  # no header: the key table's tenant
                auth(TEAM_A_2),
            )
        ]
    assert codes == [200, 200, 429, 200, 429]
