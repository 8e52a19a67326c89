"""The live event log says who changed a limit, as the past's lines do: the gateway's
/admin/events entry that came with a poll (its `source`) goes on the line of the poll whose
stats show the change, `limits: cap 256 -> 9 (by carol)`. The demo story's polls around its
cap change, played by a fake collector; the events are rewritten here."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Any

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.tui.app import LlmtopApp
from tests.support import story
from tests.support.tui import log_texts, until

CAP_AT = 151
"""The story's poll whose gateway stats first show the cap 256 -> 9."""
CAP = {"field": "max_concurrency", "old": 256, "new": 9}


@functools.cache
def polls() -> tuple[RawPoll, ...]:
    return tuple(story.recording())


class Live:
    """The story's polls `first`..`last` with `events` (poll index -> its events), then none."""

    def __init__(self, first: int, last: int, events: dict[int, tuple[dict[str, Any], ...]]):
        self.pipeline = Pipeline(HealthSettings())
        self.last_raw: RawPoll | None = None
        self.raws = [
            dataclasses.replace(polls()[i], events=events.get(i, ())) for i in range(first, last)
        ]

    async def poll(self) -> Snapshot:
        if not self.raws:
            await asyncio.Event().wait()
        self.last_raw = self.raws.pop(0)
        return self.pipeline.update(self.last_raw)

    async def aclose(self) -> None:
        return None


async def limit_lines(events: dict[int, tuple[dict[str, Any], ...]]) -> list[str]:
    live = Live(CAP_AT - 3, CAP_AT + 3, events)
    monitor = MonitorSettings(vllm_urls=(polls()[0].engines[0].url,), interval_s=0.05, nvml=False)
    app = LlmtopApp(
        live,
        monitor=monitor,
        health=HealthSettings(),
        admin=None,
        last_raw=lambda: live.last_raw,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: not live.raws, timeout_s=15)
        await pilot.pause(0.2)
        return [t for t in log_texts(app) if t.startswith("limits: ")]


def event(i: int, source: str | None, **change: Any) -> tuple[dict[str, Any], ...]:
    return ({**CAP, **change, "time": polls()[i].time, "source": source},)


async def test_a_live_limit_change_says_who_made_it() -> None:
    lines = await limit_lines({CAP_AT: event(CAP_AT, "carol")})
    assert lines == ["limits: cap 256 -> 9 (by carol)"]


async def test_an_event_a_poll_before_its_stats_still_names_who() -> None:
    """The change came between a poll's stats and its events: the event is one poll early."""
    lines = await limit_lines({CAP_AT - 1: event(CAP_AT - 1, "carol")})
    assert lines == ["limits: cap 256 -> 9 (by carol)"]


async def test_no_who_unknown_or_unmatched_is_invented() -> None:
    assert await limit_lines({}) == ["limits: cap 256 -> 9"]
    # an event the stats do not show (a change made here, a value never reached) names nobody
    assert await limit_lines({CAP_AT - 2: event(CAP_AT - 2, "dave", new=7)}) == [
        "limits: cap 256 -> 9"
    ]
    assert await limit_lines({CAP_AT: event(CAP_AT, None)}) == ["limits: cap 256 -> 9"]
