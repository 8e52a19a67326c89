"""The autopilot's IO: read the upstream's /metrics about once a second and drive the controller.

Runs as one task in the app's lifespan. It reads only while the gateway is in auto mode or has a
KV budget (so a plain gateway never touches the engine's /metrics); a read that fails holds the
budget where it is and says why in /admin/stats.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from llmtop.errors import ScrapeError
from llmtop.gateway.controller import Autopilot, AutopilotConfig, drive
from llmtop.gateway.footprint import FootprintModel
from llmtop.gateway.kvinfo import EngineScrape, parse_scrape, signals
from llmtop.gateway.state import GatewayState
from llmtop.settings import AUTOPILOT_TTFT_SLO_S

INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0


def attach(state: GatewayState) -> Autopilot:
    """Give the gateway's admission a footprint model and the tenants' TTFT budgets; the
    controller for `run`."""
    state.controller.footprint = FootprintModel()
    s = state.settings
    state.controller.tenant_ttft_slo_s = dict(s.tenant_ttft_slo_s)
    slo = state.controller.limits.ttft_slo_s or AUTOPILOT_TTFT_SLO_S
    return Autopilot(AutopilotConfig(ttft_slo_s=slo, itl_slo_s=s.itl_slo_s))


async def _read(state: GatewayState) -> str:
    assert state.session is not None
    async with state.session.get(
        state.base_url + "/metrics",
        timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S),
        allow_redirects=False,
    ) as r:
        if r.status != 200:
            raise ScrapeError(f"/metrics returned {r.status}")
        return await r.text()


async def run(state: GatewayState, pilot: Autopilot) -> None:
    """Scrape, derive, drive; forever (cancelled by the lifespan)."""
    ctl = state.controller
    prev: EngineScrape | None = None
    prev_t = time.monotonic()
    while True:
        lim = ctl.limits
        if lim.mode == "auto" or lim.max_inflight_kv_blocks is not None:
            try:
                scrape = parse_scrape(await _read(state))
            except (aiohttp.ClientError, asyncio.TimeoutError, ScrapeError, UnicodeError) as e:
                pilot.last_reason = f"upstream /metrics unreadable ({type(e).__name__}): holding"
                ctl.autopilot = pilot.status(ctl)
                prev = None
            else:
                now = time.monotonic()
                drive(ctl, pilot, signals(scrape, prev, now - prev_t), now)
                prev, prev_t = scrape, now
        else:
            prev = None
            pilot.reset(None)
            pilot.last_reason = "manual: the autopilot is off"
            ctl.autopilot = pilot.status(ctl)
        await asyncio.sleep(INTERVAL_S)


__all__ = ["attach", "run"]
