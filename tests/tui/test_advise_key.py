"""Mode advise in the TUI: the gateway panel's advice line, and `A` setting the autopilot's
suggestion on a real gateway (in front of a real sim) on 127.0.0.1, at 80x24."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.snapshot import GatewayStats
from llmtop.sources.gateway import AdminClient
from llmtop.tui.view.present import advice_text
from tests.support.tui import SilentSource, log_texts, make_app, notes, settle

SIZE = (80, 24)


def test_the_advice_line_is_shown_in_mode_advise_only() -> None:
    said = "would set KV budget 2,789 blocks (now none): headroom"
    advise = GatewayStats(url="http://gw", up=True, mode="advise", autopilot_reason=said)
    assert advice_text(advise) == said
    assert advice_text(GatewayStats(url="http://gw", up=True, mode="auto")) is None
    empty = GatewayStats(url="http://gw", up=True, mode="advise")
    assert "no suggestion yet" in (advice_text(empty) or "")


async def suggestion_of(url: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """The gateway's suggestion once it has a KV budget in it (the autopilot read the sim)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=url) as c:
        while time.monotonic() < deadline:
            auto = (await c.get("/admin/stats")).json().get("autopilot") or {}
            got: dict[str, Any] = auto.get("suggestion") or {}
            if "max_inflight_kv_blocks" in got:
                return got
            await asyncio.sleep(0.1)
    raise AssertionError("no suggestion within the time")


async def test_shift_a_applies_the_suggestion_on_the_real_gateway(
    start_sim: Callable[..., ServerThread], start_gateway: Callable[..., ServerThread]
) -> None:
    sim = start_sim(profile="fast", kv_tokens=4096)
    gw = start_gateway(sim.url, mode="advise", max_concurrency=4)
    suggestion = await suggestion_of(gw.url)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("A")
        await settle(app, pilot)
        async with httpx.AsyncClient(base_url=gw.url) as c:
            limits = (await c.get("/admin/limits")).json()
        assert limits["mode"] == "advise"
        assert limits["max_inflight_kv_blocks"] == suggestion["max_inflight_kv_blocks"]
        assert limits["max_concurrency"] == 1024
        assert any("applied the autopilot's suggestion" in t for t in log_texts(app))
        await pilot.pause()
    assert not any("failed" in n for n in notes(app))
