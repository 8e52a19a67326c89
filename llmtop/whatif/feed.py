"""The TUI's what-if source: its own window of scrapes (keeping the buckets the dashboard's poll
drops), started at the first prediction asked for, which runs on a thread so the UI never waits.
`with_whatif` joins it to the snapshot source the TUI polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from llmtop.core.base.snapshot import Snapshot
from llmtop.errors import LlmtopError, UsageError
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import GatewayReader
from llmtop.sources.http.clients import http_client

if TYPE_CHECKING:  # the what-if itself (the engine model) is imported when first asked for
    from llmtop.whatif.model.window import Point
    from llmtop.whatif.service import Analysis

WINDOW_S = 30.0
"""Seconds of scrapes the TUI's what-if calibrates on."""
INTERVAL_S = 2.0
MIN_POINTS = 4
"""Scrapes needed before a first prediction (~6 s): early ones say how little they saw."""
HORIZON_S = 60.0


def off_the_loop(work: Callable[..., Analysis], *args: object) -> asyncio.Future[Analysis]:
    """`work(*args)` on a daemon thread of its own, its answer on the loop.

    Not `asyncio.to_thread`: the default executor's threads are joined at exit, so `q` pressed
    during a prediction (seconds of CPU) would wait for it; a daemon thread is dropped with
    the process, and an answer nobody awaits any more is discarded."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Analysis] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            answer = work(*args)
        except BaseException as e:  # handed to the awaiting coroutine, as to_thread does
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(settle, False, e)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, True, answer)

    threading.Thread(target=run, name="llmtop-whatif", daemon=True).start()
    return future


class WhatIfFeed:
    """Scrapes one engine (and the gateway) every INTERVAL_S while the app runs, once started."""

    def __init__(
        self,
        vllm_url: str,
        gateway_url: str | None,
        token: str | None,
        health: HealthSettings,
        *,
        points: Iterable[Point] = (),
        live: bool = True,
    ) -> None:
        self.vllm_url = vllm_url
        self.health = health
        self._reader = GatewayReader(gateway_url, token, optional=True) if gateway_url else None
        self.points: deque[Point] = deque(points)
        self.live = live
        """False: never scrape, predict from `points` only (tests, screenshots)."""
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, monitor: MonitorSettings, health: HealthSettings) -> WhatIfFeed | None:
        """The feed for the first engine; None when no engine is configured."""
        if not monitor.vllm_urls:
            return None
        return cls(monitor.vllm_urls[0], monitor.gateway_url, monitor.admin_token, health)

    def start(self) -> None:
        """Begin scraping (idempotent); the first prediction is possible ~6 s later."""
        if self._task is None and self.live:
            self._task = asyncio.ensure_future(self._run())

    @property
    def seconds_seen(self) -> float:
        return self.points[-1].t - self.points[0].t if len(self.points) >= 2 else 0.0

    async def _run(self) -> None:
        from llmtop.whatif.collect import scrape_once

        self._client = http_client(INTERVAL_S)
        while True:
            try:
                point = await scrape_once(self._client, self.vllm_url, self._reader, INTERVAL_S)
            except LlmtopError as e:
                self.error = str(e)
            else:
                self.error = None
                self.points.append(point)
                while self.points and point.t - self.points[0].t > WINDOW_S:
                    self.points.popleft()
            await asyncio.sleep(INTERVAL_S)

    async def analyse(self, caps: tuple[int, ...], *, band: bool = False) -> Analysis:
        """Predict the current limits and `caps` on a worker thread; UsageError until ready."""
        from llmtop.whatif.service import Options, analyse

        self.start()
        if len(self.points) < MIN_POINTS:
            why = f": {self.error}" if self.error else ""
            raise UsageError(
                f"what-if: collecting metrics ({self.seconds_seen:.0f} s of {WINDOW_S:.0f}){why}"
            )
        opts = Options(
            caps=caps,
            horizon_s=HORIZON_S,
            band=band,
            ttft_slo_s=self.health.slo.ttft_s,
            itl_slo_s=self.health.slo.itl_s,
        )
        return await off_the_loop(analyse, list(self.points), opts)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._client is not None:
            await self._client.aclose()


class Polled(Protocol):
    """A snapshot source (the TUI's `SnapshotSource`): polled once per interval, closed once."""

    async def poll(self) -> Snapshot: ...

    async def aclose(self) -> None: ...


class SnapshotsWithWhatIf:
    """A snapshot source that also predicts: `poll` is the source's, `analyse` the feed's, and
    `aclose` closes both."""

    def __init__(self, snapshots: Polled, feed: WhatIfFeed) -> None:
        self.snapshots = snapshots
        self.feed = feed

    async def poll(self) -> Snapshot:
        return await self.snapshots.poll()

    async def analyse(self, caps: tuple[int, ...], *, band: bool = False) -> Analysis:
        return await self.feed.analyse(caps, band=band)

    async def aclose(self) -> None:
        try:
            await self.snapshots.aclose()
        finally:
            await self.feed.aclose()


def with_whatif(
    snapshots: Polled, monitor: MonitorSettings, health: HealthSettings
) -> Polled | SnapshotsWithWhatIf:
    """`snapshots` with the first engine's what-if joined to it; as is without an engine."""
    feed = WhatIfFeed.from_settings(monitor, health)
    return snapshots if feed is None else SnapshotsWithWhatIf(snapshots, feed)
