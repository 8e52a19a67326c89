"""Issue 38's bad input and faults, on a real `llmtop gateway --autopilot` in front of a real
`llmtop sim` over sockets: a burst of requests inside one second, clients sending max_tokens
of 1 and of 100,000, and the engine's /metrics failing in the middle of the burst. The
predictions and the accounting stay sane (no negative, NaN or infinite figure), the refusals
ledger adds up, and every request ends in one outcome."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx

from tests.support.gateway_fakes import wait_stats
from tests.support.gateway_sim import Start, accounted, body

BURST = 150
"""Requests sent within one second."""


def broken_metrics(app: Any, broken: list[bool]) -> Any:
    """The sim's ASGI app, whose GET /metrics answers 503 while `broken[0]` (a scrape that
    fails: the engine's exporter down, a proxy in between timing out)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/metrics" and broken[0]:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"exporter down"})
            return
        await app(scope, receive, send)

    return wrapped


def numbers(doc: Any, path: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON document, with where it is."""
    if isinstance(doc, bool):
        return []
    if isinstance(doc, int | float):
        return [(path, float(doc))]
    if isinstance(doc, dict):
        return [x for k, v in doc.items() for x in numbers(v, f"{path}.{k}")]
    if isinstance(doc, list):
        return [x for i, v in enumerate(doc) for x in numbers(v, f"{path}[{i}]")]
    return []


async def test_a_burst_with_absurd_lengths_and_a_failing_scrape_stays_sane(
    start_sim: Start, start_gateway: Start, serve_app: Any
) -> None:
    from llmtop.settings import SimSettings
    from llmtop.sim.server import create_app

    broken = [False]
    sim = serve_app(broken_metrics(create_app(SimSettings(port=0, profile="fast")), broken))
    gw = start_gateway(sim.url, autopilot=True)
    prompt = list(range(1, 201))
    lengths = (1, 24, 100_000)  # 100,000 is past the engine's context: its own 400
    async with httpx.AsyncClient(base_url=gw.url, timeout=60) as c:
        await wait_stats(c, lambda s: (s.get("autopilot") or {}).get("budget_blocks") is not None)
        for _ in range(3):  # lives measured: predictions, and 429s for a predicted start
            assert (await c.post("/v1/completions", json=body(24, prompt))).status_code == 200
        posts = []
        for i in range(BURST):
            if i == BURST // 3:
                broken[0] = True
            mt = lengths[i % len(lengths)]
            posts.append(asyncio.ensure_future(c.post("/v1/completions", json=body(mt, prompt))))
            await asyncio.sleep(1.0 / BURST)
        while_broken = await wait_stats(
            c, lambda s: "unreadable" in ((s.get("autopilot") or {}).get("reason") or "")
        )
        results = await asyncio.gather(*posts)
        broken[0] = False
        s = await wait_stats(c, lambda s: s["in_flight"] == 0 and s["queued"] == 0, 30.0)
    codes = [r.status_code for r in results]
    assert set(codes) <= {200, 400, 429}, codes
    assert codes.count(200) > 0
    assert all(
        codes[i] == 400 for i in range(len(codes)) if lengths[i % 3] == 100_000 and codes[i] != 429
    )
    accounted(s)
    assert s["offered"] == BURST + 3
    assert s["in_flight_kv_blocks"] == 0
    assert s["unprefilled_prompt_tokens"] == 0
    assert while_broken["limits"]["max_inflight_kv_blocks"] is not None  # held, not dropped
    for where, x in numbers(s) + numbers(while_broken):
        assert math.isfinite(x), where
        if where.startswith((".refusals", ".outcomes", ".rejections", ".autopilot")):
            assert x >= 0, where
    led = s["refusals"]
    assert led["refused"] == s["rejections"]["ttft_budget"]
    assert led["settled"] + led["watching"] <= led["refused"]
    assert led["slot_within_budget"] <= led["settled"]
    assert sum(m["refused"] for m in led["minutes"]) == led["refused"]
    assert codes.count(429) == s["outcomes"]["rejected"] + s["outcomes"]["timed_out"]
