"""`llmtop snapshot`'s IO: read every target at the monitor interval across the window.

The same `Collector` as the TUI reads the polls (each target bounded below the interval); the
pure `core.pipeline.verdict.judge_window` then turns them into the verdict. Polls are due at the
first poll's time plus whole intervals, the last exactly at the end of the window, on the clock
that stamps the polls: the last poll is never short of the window (stale-data needs all 15 s).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import WindowSnapshot
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

    The first read opens the connections and asks each engine's /version, so what it read is
    later than its time stamp (against the sim, the 1-second decode rate after it read 8% low,
    most of batching-cliff's 10% "flat"). It only says whether anything answers; the window
    starts at the next read. A poll that overruns its interval (a slow target) moves the next one to
    the next due time still ahead, never to a burst of late polls.
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
