"""The autopilot's IO, one task in the app's lifespan: read every replica's /metrics about once a
second and drive the controller, only in auto or advise mode or with a KV budget (a plain gateway
never reads the engine's /metrics). The budget covers every replica in rotation, so they are read
concurrently (core's reader, in each engine's dialect) and summed (`fleet_signals`), the engine's
kind handed on to be named; one whose read fails is left out of that tick and named; with none
read the budget holds (/admin/stats says why)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from llmtop.core.derive.signals import fleet_signals
from llmtop.core.dialects import catalog as dialects
from llmtop.core.exposition import promtext
from llmtop.core.vllm.scrape import EngineScrape
from llmtop.errors import ScrapeError
from llmtop.gateway.admission.footprint import FootprintModel
from llmtop.gateway.autopilot.autopilot import Autopilot, AutopilotConfig
from llmtop.gateway.autopilot.drive import drive
from llmtop.gateway.autopilot.engines import engine_named, info_slots, slots_in
from llmtop.gateway.server.context import GatewayContext
from llmtop.gateway.upstreams.balancer import OK

INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0
KEEP = promtext.keep_names(dialects.sample_names(bucketed=("generation_len",)))
"""The monitor's names, and the output-length buckets the footprint learns from."""


def read_scrape(text: str, kind: str | None = None) -> EngineScrape:
    """An upstream's /metrics body as core reads it, in its engine's dialect (`kind`:
    `--engine-kind`'s, else detected); ScrapeError when it carries no family llmtop reads."""
    scrape = dialects.extract(promtext.parse(text, KEEP), kind=kind)
    if not scrape.has_vllm:
        raise ScrapeError(
            "no family llmtop reads in the upstream's /metrics (its metrics off, or an engine "
            f"llmtop does not know: it reads {', '.join(dialects.KINDS)})"
        )
    return scrape


def attach(state: GatewayContext) -> Autopilot:
    """Give the gateway's admission a footprint model; the controller for `run`, working to
    the SLO ([slo])."""
    state.admission.footprint = FootprintModel()
    slo = state.settings.slo
    return Autopilot(AutopilotConfig(ttft_slo_s=slo.ttft_s, itl_slo_s=slo.itl_s))


async def metrics_text(state: GatewayContext, url: str, timeout: aiohttp.ClientTimeout) -> str:
    """An upstream's Prometheus text: at its dialect's path with `--engine-kind` (trtllm-serve's
    /prometheus/metrics), else /metrics, read again at trtllm-serve's path when /metrics
    answered with its JSON. ScrapeError on a status other than 200 (worded as the console's
    recorder words it: the history keeps it)."""
    assert state.session is not None
    kind = state.settings.engine_kind
    path = dialects.metrics_path(kind) or "/metrics"
    for _ in range(2):
        async with state.session.get(url + path, timeout=timeout, allow_redirects=False) as r:
            if r.status != 200:
                raise ScrapeError(f"HTTP {r.status} from {url}{path}")
            text = await r.text()
        other = None if kind is not None else dialects.metrics_path(None, text)
        if other is None or other == path:
            return text
        path = other
    return text


async def _read(state: GatewayContext, url: str) -> EngineScrape:
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    text = await metrics_text(state, url, timeout)
    return read_scrape(text, state.settings.engine_kind)


_FAILS = (aiohttp.ClientError, asyncio.TimeoutError, ScrapeError, UnicodeError)


async def _read_all(state: GatewayContext) -> tuple[dict[str, EngineScrape], dict[str, str]]:
    """Every replica in service read at once: the scrapes, and why each other one failed."""
    urls = [r.url for r in state.balancer.replicas if r.state == OK] or [
        r.url for r in state.balancer.replicas
    ]
    got = await asyncio.gather(*(_read(state, u) for u in urls), return_exceptions=True)
    scrapes: dict[str, EngineScrape] = {}
    failed: dict[str, str] = {}
    for url, res in zip(urls, got, strict=True):
        if isinstance(res, EngineScrape):
            scrapes[url] = res
        elif isinstance(res, _FAILS):
            failed[url] = type(res).__name__
        else:
            raise res  # a bug, not a replica's fault
    return scrapes, failed


async def _slots_told(
    state: GatewayContext, scrapes: dict[str, EngineScrape], told: dict[str, int | None]
) -> int | None:
    """The slots the replicas say they have, added up (llama-server's /props `total_slots`),
    each asked once and remembered in `told`; None unless every replica read says."""
    for url, scrape in scrapes.items():
        where = info_slots(scrape.engine)
        if where is None:
            return None
        if url not in told:
            told[url] = await _ask_slots(state, url + where[0], where[1])
    said = [told.get(url) for url in scrapes]
    return None if not said or None in said else sum(n for n in said if n is not None)


async def _ask_slots(state: GatewayContext, url: str, field: str) -> int | None:
    assert state.session is not None
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    try:
        async with state.session.get(url, timeout=timeout, allow_redirects=False) as r:
            if r.status != 200:
                return None
            return slots_in(await r.json(content_type=None), field)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, UnicodeError):
        return None  # not said: the slots are learned from /metrics


async def run(state: GatewayContext, pilot: Autopilot) -> None:
    """Scrape, derive, drive; forever (cancelled by the lifespan)."""
    ctl = state.admission
    prev: dict[str, EngineScrape] = {}
    prev_t = time.monotonic()
    told: dict[str, int | None] = {}
    while True:
        lim = ctl.limits
        if lim.mode in ("auto", "advise") or lim.max_inflight_kv_blocks is not None:
            scrapes, failed = await _read_all(state)
            if not scrapes:
                pilot.unread = ()
                why = ", ".join(sorted(set(failed.values()))) or "no replica"
                drive(ctl, pilot, None, time.monotonic(), unread=why)
                prev = {}
            else:
                now = time.monotonic()
                pairs = [(s, prev.get(url)) for url, s in scrapes.items()]
                pilot.unread = tuple(sorted(failed))
                kind = engine_named({s.engine for s in scrapes.values()})
                slots = await _slots_told(state, scrapes, told)
                sig = fleet_signals(pairs, now - prev_t)
                drive(ctl, pilot, sig, now, engine=kind, slots_told=slots)
                prev, prev_t = scrapes, now
        else:
            prev = {}
            pilot.reset(None)
            pilot.last_reason = "manual: the autopilot is off"
            ctl.autopilot = pilot.status(ctl)
        await asyncio.sleep(INTERVAL_S)


__all__ = ["attach", "run"]
