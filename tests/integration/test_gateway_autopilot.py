"""`llmtop gateway --autopilot` in front of `llmtop sim` over real sockets: the KV capacity read
from the sim's /metrics, admission by footprint (no preemption where an unbounded burst
thrashes), and a manual change that hands control back to the person."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from llmtop.sim.model import Engine
from tests.support.gateway_fakes import wait_stats
from tests.support.gateway_sim import Start, accounted, at_engine, body, engine_of


async def test_autopilot_admits_by_footprint_and_hands_over_on_a_manual_change(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast", kv_tokens=4096)  # 256 blocks of 16
    engine = engine_of(sim)
    gw = start_gateway(sim.url, autopilot=True)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, at_engine(engine))
            await asyncio.sleep(0.002)

    prompt = list(range(1, 1001))  # 1,000 token ids + 24 out = 64 blocks: 4 fit in the cache
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as c:
        ready = await wait_stats(
            c, lambda s: (s.get("autopilot") or {}).get("budget_blocks") is not None
        )
        assert ready["mode"] == "auto"
        assert ready["autopilot"]["capacity_blocks"] == 256
        watcher = asyncio.ensure_future(watch())
        posts = [
            asyncio.ensure_future(c.post("/v1/completions", json=body(24, prompt)))
            for _ in range(12)
        ]
        results = await asyncio.gather(*posts)
        watcher.cancel()
        s = await wait_stats(c, lambda s: s["in_flight"] == 0 and s["queued"] == 0)
        events = (await c.get("/admin/events")).json()["events"]
        exposition = (await c.get("/metrics")).text
        r = await c.patch(
            "/admin/limits", json={"max_concurrency": 2}, headers={"x-llmtop-source": "oncall"}
        )
        assert r.status_code == 200
        after: dict[str, Any] = (await c.get("/admin/stats")).json()
        events_after = (await c.get("/admin/events")).json()["events"]
    unbounded = Engine(engine.config)  # the same burst straight at the same engine thrashes
    for _ in range(12):
        unbounded.add_request(len(prompt), 24)
    while unbounded.has_work():
        unbounded.step()
    assert unbounded.stats.num_preemptions > 0
    codes = [x.status_code for x in results]
    assert set(codes) <= {200, 429}
    assert codes.count(200) >= 4
    assert engine.stats.num_preemptions == 0
    assert peak <= 256 // 64 + 1  # the footprint budget (at most one more: the cache's own +2 %)
    auto = [e for e in events if e["source"] == "autopilot"]
    assert any("start at the KV cache" in e.get("reason", "") for e in auto)
    accounted(s)
    assert "llmtop_gateway_autopilot_auto 1.0" in exposition
    assert "llmtop_gateway_limit_max_inflight_kv_blocks" in exposition
    assert after["mode"] == "manual"
    switch = next(e for e in events_after if e["field"] == "mode")
    assert "autopilot off" in switch["reason"]


async def test_autopilot_over_two_replicas_budgets_both_caches(
    start_sim: Start, start_gateway: Start
) -> None:
    """Two replicas of 256 blocks: the budget covers both (512), the balancer spreads it, and a
    burst of 64-block requests preempts on neither."""
    sims = [start_sim(profile="fast", kv_tokens=4096) for _ in range(2)]
    engines = [engine_of(s) for s in sims]
    gw = start_gateway(",".join(s.url for s in sims), autopilot=True)
    peaks = [0, 0]

    async def watch() -> None:
        while True:
            for i, e in enumerate(engines):
                peaks[i] = max(peaks[i], at_engine(e))
            await asyncio.sleep(0.002)

    prompt = list(range(1, 1001))
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as c:
        ready = await wait_stats(
            c, lambda s: (s.get("autopilot") or {}).get("capacity_blocks") == 512
        )
        assert ready["autopilot"]["budget_blocks"] is not None
        watcher = asyncio.ensure_future(watch())
        posts = [
            asyncio.ensure_future(c.post("/v1/completions", json=body(24, prompt)))
            for _ in range(16)
        ]
        results = await asyncio.gather(*posts)
        watcher.cancel()
        s = await wait_stats(c, lambda s: s["in_flight"] == 0 and s["queued"] == 0)
    codes = [x.status_code for x in results]
    assert codes.count(200) >= 8
    assert [e.stats.num_preemptions for e in engines] == [0, 0]
    assert all(1 <= p <= 256 // 64 + 1 for p in peaks)  # both used, neither past its cache
    accounted(s)


async def test_advise_mode_suggests_and_applies_only_when_asked(
    start_sim: Start, start_gateway: Start
) -> None:
    """Mode advise: the autopilot reads the engine and says what it would set, the limits stay
    where they were; POST /admin/autopilot/apply sets its suggestion and the mode stays."""
    sim = start_sim(profile="fast", kv_tokens=4096)
    gw = start_gateway(sim.url, mode="advise", max_concurrency=4)
    prompt = list(range(1, 201))
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as c:
        for _ in range(3):  # a few answers: a prefill rate to suggest from
            r = await c.post("/v1/completions", json=body(8, prompt))
            assert r.status_code == 200
        s = await wait_stats(
            c,
            lambda s: (
                "max_inflight_kv_blocks" in ((s.get("autopilot") or {}).get("suggestion") or {})
            ),
        )
        suggestion = s["autopilot"]["suggestion"]
        assert s["mode"] == "advise"
        assert s["limits"]["max_concurrency"] == 4  # nothing moved by itself
        assert s["limits"]["max_inflight_kv_blocks"] is None
        assert s["autopilot"]["reason"].startswith("would set KV budget")
        assert suggestion["max_concurrency"] == 1024
        r = await c.post("/admin/autopilot/apply", headers={"x-llmtop-source": "oncall"})
        assert r.status_code == 200
        limits = r.json()["limits"]
        assert limits["mode"] == "advise"
        assert limits["max_inflight_kv_blocks"] == suggestion["max_inflight_kv_blocks"]
        events = (await c.get("/admin/events")).json()["events"]
        assert any(
            e["source"] == "oncall" and e["field"] == "max_inflight_kv_blocks" for e in events
        )
        await c.patch("/admin/limits", json={"mode": "manual"})
        r = await c.post("/admin/autopilot/apply")
        assert r.status_code == 409
        assert "advise" in r.json()["error"]["message"]
