"""The balancer's IO, one task in the app's lifespan: probe the /health of ejected replicas once
their time is out (to bring them back) and of those in rotation every CHECK_EVERY_S (a hung one that
refuses nothing is out within `deadline_s`); read each one's KV capacity and queue from /metrics
(`pilot.read_scrape`) for its headroom; log each move out and back. Each probe or read has a timeout
and its own task, so a hung replica never stalls the others or the queue's timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp

from llmtop.errors import ScrapeError
from llmtop.gateway.server.autopilot_loop import metrics_text, read_scrape
from llmtop.gateway.server.context import GatewayContext
from llmtop.gateway.server.wire import describe_error
from llmtop.gateway.upstreams.balancer import Replica

log = logging.getLogger("llmtop.gateway")

TICK_S = 0.25
"""How often ejected replicas whose time is over are probed."""
CHECK_EVERY_S = 0.5
"""How often each replica in rotation has its /health asked (a hung one is out within the
balancer's deadline_s plus this)."""
SCRAPE_EVERY_S = 2.0
"""How often each replica's /metrics is read (only with several replicas)."""
TIMEOUT = aiohttp.ClientTimeout(total=1.0)


async def _probe(state: GatewayContext, r: Replica) -> None:
    assert state.session is not None
    bal = state.balancer
    error: str | None = None
    try:
        async with state.session.get(
            r.url + "/health",
            timeout=aiohttp.ClientTimeout(total=bal.deadline_s),
            allow_redirects=False,
        ) as resp:
            if resp.status >= 500:
                error = f"/health returned {resp.status}"
    except asyncio.TimeoutError:
        error = f"no /health answer within {bal.deadline_s:g} s (hung)"
    except aiohttp.ClientError as e:
        error = f"unreachable: {describe_error(e)}"
    bal.probed(r, error)
    state.apply_shares()


def _log_events(state: GatewayContext, seen: int) -> int:
    """One log line per replica event since the `seen`th; returns the count logged so far."""
    events = state.balancer.events
    total = state.balancer.events_total
    for e in list(events)[len(events) - min(len(events), total - seen) :]:
        if e.change == "out":
            log.warning("llmtop gateway: replica %s out of rotation: %s", e.url, e.reason)
        elif e.change == "up":
            log.info("llmtop gateway: replica %s in rotation: its first answer", e.url)
        elif e.change == "added":
            why = f" ({e.reason})" if e.reason else ""
            log.info("llmtop gateway: replica %s added%s; in rotation at its first answer",
                     e.url, why)  # fmt: skip
        elif e.change == "draining":
            log.info("llmtop gateway: replica %s left: draining, nothing new sent (%s)",
                     e.url, e.reason)  # fmt: skip
        elif e.change == "removed":
            log.info("llmtop gateway: replica %s removed (%s)", e.url, e.reason)
        else:
            log.info("llmtop gateway: replica %s back in rotation", e.url)
    return total


async def _scrape(state: GatewayContext, r: Replica) -> None:
    assert state.session is not None
    try:
        text = await metrics_text(state, r.url, TIMEOUT)
        scrape = read_scrape(text, state.settings.engine_kind)
    except (aiohttp.ClientError, asyncio.TimeoutError, ScrapeError, UnicodeError):
        return  # headroom stays as last read; failures on traffic eject, not this
    tokens, size = scrape.kv_capacity_tokens, scrape.kv_block_size
    r.capacity_blocks = tokens // size if tokens is not None and size else None
    waiting = scrape.gauges.get("waiting")
    if waiting is not None:  # unknown: the last reading stands, not an empty queue
        r.waiting = waiting


async def watch(state: GatewayContext) -> None:
    """Probe and read forever (cancelled by the lifespan)."""
    bal = state.balancer
    tasks: dict[tuple[str, str], asyncio.Future[None]] = {}
    loop = asyncio.get_running_loop()
    next_scrape = next_check = 0.0
    logged = 0
    try:
        while True:
            now = loop.time()
            due = bal.to_probe()
            if now >= next_check:
                next_check = now + CHECK_EVERY_S
                due += bal.to_check()
            for r in due:
                key = ("probe", r.url)
                if key not in tasks or tasks[key].done():
                    tasks[key] = asyncio.ensure_future(_probe(state, r))
            logged = _log_events(state, logged)
            if len(bal.replicas) > 1 and now >= next_scrape:
                next_scrape = now + SCRAPE_EVERY_S
                for r in bal.replicas:
                    key = ("scrape", r.url)
                    if key not in tasks or tasks[key].done():
                        tasks[key] = asyncio.ensure_future(_scrape(state, r))
            state.apply_shares()
            await asyncio.sleep(TICK_S)
    finally:
        for t in tasks.values():
            t.cancel()
        for t in tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await t


__all__ = ["watch"]
