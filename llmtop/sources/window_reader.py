"""`llmtop snapshot`'s IO: read every target at the monitor interval across the window.

The TUI's `Collector` reads, `core.pipeline.verdict.judge_window` judges. Polls are due at whole
intervals from the first, the last at the window's very end (stale-data needs all 15 s).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.window import WindowSnapshot
from llmtop.core.pipeline.verdict import judge_window
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector


async def read_window(
    read: Callable[[], Awaitable[RawPoll]],
    clock: Callable[[], float],
    window_s: float,
    interval_s: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[RawPoll]:
    """Polls from now to `window_s` later, `interval_s` apart; one only if no engine answers.

    The first read only checks that something answers (it lags its stamp); the window starts at the
    next. A poll that overruns moves the next to the next due time, never to a burst of late polls.
    """
    first = await read()
    if not any(e.samples is not None for e in first.engines):
        return [first]  # nothing answers: say so now rather than after the window
    first = await read()
    polls = [first]
    t0 = first.time
    end = t0 + window_s
    k = 1
    while polls[-1].time < end:
        now = clock()
        k = max(k, math.floor((now - t0) / interval_s) + 1)
        due = min(t0 + k * interval_s, end)
        while now < due:
            await sleep(due - now)
            now = clock()
        polls.append(await read())
        k += 1
    return polls


async def take_snapshot(
    monitor: MonitorSettings, health: HealthSettings, window_s: float
) -> WindowSnapshot:
    """Watch the targets for `window_s` seconds and judge the window."""
    collector = Collector(monitor, health)
    try:
        polls = await read_window(collector.read, collector.clock, window_s, monitor.interval_s)
    finally:
        await collector.aclose()
    return judge_window(polls, health, monitor.interval_s)
