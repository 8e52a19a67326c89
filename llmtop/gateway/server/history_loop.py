"""The gateway's history, its event-loop half: once a second, read every replica's /metrics
(kept as the console's recorder keeps them: the families llmtop reads), take the gateway's own
/admin/stats document, the limit changes since the last poll (with who) and the replicas' moves
in and out of rotation, and hand the `RawPoll` to the keeper's thread (gateway/history/keeper.py),
which writes it. Nothing here waits on a disk; a replica that does not answer within
`SCRAPE_TIMEOUT_S` is kept as its error, as the console records it.

The history reads /metrics at its own poll rather than keeping the autopilot's reads: those are
up to a second old at the poll's time (the two loops drift apart), which would jitter every rate
the report derives; the extra read costs the gateway +0.45 % of a core (BENCHMARKS.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import aiohttp

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.dialects.catalog import detect, sample_names
from llmtop.core.exposition import promtext
from llmtop.errors import ConfigError, ScrapeError
from llmtop.gateway.history.keeper import HistoryKeeper
from llmtop.gateway.server.autopilot_loop import metrics_text
from llmtop.gateway.server.context import GatewayContext, upstream_urls
from llmtop.gateway.server.wire import describe_error
from llmtop.settings import GatewaySettings

log = logging.getLogger("llmtop.gateway")

INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 0.9
"""Under a poll: a slow replica is late once, and recorded as such, not a stalled loop."""
KEEP = promtext.keep_names(sample_names())
"""What the console's recorder keeps of a scrape (sources.vllm's keep-list)."""


def history_path(settings: GatewaySettings) -> Path:
    """The gateway's history file: one per port, in history_dir or $XDG_STATE_HOME/llmtop."""
    folder = settings.history_dir or str(
        Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "llmtop"
    )
    port = settings.listen.rpartition(":")[2] or "9000"
    return Path(folder).expanduser() / f"gateway-{port}.sqlite"


def keeper_of(settings: GatewaySettings, token: str | None) -> HistoryKeeper:
    """The keeper for `settings` (off with --no-history); not started. ConfigError for a
    bound that keeps nothing."""
    if not settings.history_max_age_s > 0 or not settings.history_max_mb > 0:
        raise ConfigError(
            "gateway: history_max_age_s and history_max_mb must be more than 0 (--no-history"
            f" keeps none), got {settings.history_max_age_s:g} and {settings.history_max_mb:g}"
        )
    host = settings.listen.rpartition(":")[0] or "127.0.0.1"
    targets = {
        "vllm": upstream_urls(settings.upstream),
        "gateway": f"http://{host}:{settings.listen.rpartition(':')[2]}",
        "dcgm": None,
        "source": "gateway history",
    }
    return HistoryKeeper(
        history_path(settings) if settings.history else None,
        max_age_s=settings.history_max_age_s,
        max_bytes=int(settings.history_max_mb * 1e6),
        targets=targets,
        secrets=(token,) if token else (),
        why_off=None if settings.history else "turned off (--no-history)",
    )


class HistoryPoller:
    """What a poll reads that the gateway does not already hold: the replicas' samples, and
    which events are new since the previous poll."""

    def __init__(self, state: GatewayContext, gateway_url: str) -> None:
        self.state = state
        self.gateway_url = gateway_url
        self._kinds: dict[str, str | None] = {}
        self._last_event: dict[str, Any] | None = None
        self._replica_events = state.balancer.events_total

    async def _engine(self, url: str) -> RawEngine:
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
        try:  # the autopilot's read: the dialect's path (trtllm-serve's), --engine-kind's
            samples = promtext.parse(await metrics_text(self.state, url, timeout), KEEP)
        except asyncio.TimeoutError:
            error = f"no answer from {url}/metrics within {SCRAPE_TIMEOUT_S:g} s"
            return RawEngine(url, None, error=error, engine=self._kinds.get(url))
        except (aiohttp.ClientError, ScrapeError, UnicodeError) as e:
            error = str(e) if isinstance(e, ScrapeError) else f"{url}: {describe_error(e)}"
            return RawEngine(url, None, error=error, engine=self._kinds.get(url))
        if url not in self._kinds:
            spoken = detect([s.name for s in samples]).dialect
            self._kinds[url] = None if spoken is None else spoken.kind
        return RawEngine(url, samples, engine=self._kinds[url])

    def _new_events(self) -> tuple[dict[str, Any], ...]:
        """The limit changes since the last poll (the controller keeps its last 200)."""
        events = list(self.state.admission.events)
        last, self._last_event = self._last_event, events[-1] if events else None
        if last is None:
            return tuple(dict(e) for e in events)
        for i in range(len(events) - 1, -1, -1):
            if events[i] is last:
                return tuple(dict(e) for e in events[i + 1 :])
        return tuple(dict(e) for e in events)

    def _replica_moves(self, wall: float) -> list[dict[str, Any]]:
        """The replicas' moves since the last poll, stamped in wall time."""
        bal = self.state.balancer
        new = min(len(bal.events), bal.events_total - self._replica_events)
        self._replica_events = bal.events_total
        mono = time.monotonic()
        return [
            {"time": wall - (mono - e.time), "url": e.url, "change": e.change, "reason": e.reason}
            for e in list(bal.events)[len(bal.events) - new :]
        ]

    async def poll(self) -> RawPoll:
        """One poll: every replica read at once, then the gateway's own state."""
        urls = [r.url for r in self.state.balancer.replicas]
        engines = await asyncio.gather(*(self._engine(u) for u in urls))
        now = time.time()
        stats: dict[str, Any] = dict(self.state.stats())
        moves = self._replica_moves(now)
        if moves:
            stats["replica_events"] = moves
        return RawPoll(
            time=now,
            engines=tuple(engines),
            gateway_url=self.gateway_url,
            gateway=stats,
            events=self._new_events(),
        )


async def run(state: GatewayContext, keeper: HistoryKeeper, gateway_url: str) -> None:
    """Poll every INTERVAL_S and hand each poll to the keeper; forever (cancelled by the
    lifespan). A poll that overruns shifts the next, it never doubles up."""
    poller = HistoryPoller(state, gateway_url)
    loop = asyncio.get_running_loop()
    deadline = loop.time()
    failed: str | None = None
    while True:
        try:
            keeper.put(await poller.poll())
            failed = None
        except Exception as e:  # a bug here must not end history unsaid, nor the gateway
            if failed != type(e).__name__:
                log.warning("llmtop gateway: history: a poll failed: %s: %s", type(e).__name__, e)
            failed = type(e).__name__
        deadline += INTERVAL_S
        delay = deadline - loop.time()
        if delay < 0:
            deadline, delay = loop.time(), 0.0
        await asyncio.sleep(delay)


def start(state: GatewayContext) -> asyncio.Future[None] | None:
    """Start the keeper's thread and the poll task (None with history off)."""
    keeper = state.history
    if keeper is None or keeper.path is None:
        return None
    keeper.start()
    return asyncio.ensure_future(run(state, keeper, str(keeper.targets.get("gateway"))))


async def stop(state: GatewayContext, task: asyncio.Future[None] | None) -> None:
    """Stop polling, write what is queued and close the file (off the loop)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if state.history is not None:
        await asyncio.to_thread(state.history.close)


__all__ = ["HistoryPoller", "history_path", "keeper_of", "run", "start", "stop"]
