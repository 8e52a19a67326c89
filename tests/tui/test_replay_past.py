"""A replay of the console's past (`llmtop replay --prometheus/--gateway`, the live `h` key):
limit changes a poll carries as the gateway's events (`RawPoll.events`) are in the replay's
log, once: on a poll without the gateway's stats (Prometheus' range) as their own line, on one
whose stats show the change as who made it. Small recordings built here, fake clocks."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

from llmtop.core.base.raw import RawPoll
from llmtop.core.pipeline.past import recording_of
from llmtop.core.record.encode import header
from llmtop.recording.replay import ReplaySource, open_replay
from llmtop.recording.writer import save_recording
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.tui.replay_app import ReplayApp
from tests.support import story
from tests.support.tui import log_texts

SIZE = (100, 30)
CAP_AT = 151
"""The story's poll where the gateway's cap goes 256 -> 9 (its event's source: demo)."""
UNSEEN = {"field": "max_concurrency", "old": 256, "new": 9, "source": None}
WHO = "who: not in Prometheus"


@functools.cache
def polls() -> tuple[RawPoll, ...]:
    return tuple(story.recording())


def prometheus_like(first: int, last: int) -> list[RawPoll]:
    """The story's polls as a Prometheus range gives them: no gateway stats, the cap's change
    an event of its poll, who made it unknown."""
    out = []
    for raw in polls()[first:last]:
        events: tuple[dict[str, Any], ...] = ()
        if raw is polls()[CAP_AT]:
            events = ({**UNSEEN, "time": raw.time, "reason": WHO},)
        out.append(dataclasses.replace(raw, gateway=None, gateway_url=None, events=events))
    return out


def replay_of(raws: list[RawPoll], *, at_end: bool = True) -> ReplayApp:
    targets: dict[str, object] = {"vllm": [], "prometheus": None, "gateway": None}
    recording = recording_of(raws, "prometheus history", header(1.0, targets, raws[0].time))
    source = ReplaySource(recording, HealthSettings(), paused=True, clock=lambda: 0.0)
    if at_end:
        source.seek_end()
    return ReplayApp(
        source,
        monitor=MonitorSettings(vllm_urls=("history",), read_only=True),
        health=HealthSettings(),
        clock=lambda: 0.0,
    )


async def ready(app: ReplayApp, pilot: Any) -> None:
    await app.first_snapshot.wait()
    deadline = time.monotonic() + 30
    while app.replay.computed < len(app.replay.recording) and time.monotonic() < deadline:
        await pilot.pause(0.02)


def limit_lines(app: ReplayApp) -> list[str]:
    return [t for t in log_texts(app) if t.startswith("limits: ")]


async def test_a_prometheus_past_shows_its_limit_change_in_the_replays_log() -> None:
    app = replay_of(prometheus_like(CAP_AT - 20, CAP_AT + 20))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        assert limit_lines(app) == [f"limits: cap 256 -> 9 ({WHO})"]
        (line,) = [e for e in app.events if e.text.startswith("limits: ")]
        assert line.time == polls()[CAP_AT].time


async def test_playing_through_the_change_logs_it_once_and_seeking_back_forgets_it() -> None:
    app = replay_of(prometheus_like(CAP_AT - 5, CAP_AT + 5), at_end=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        assert limit_lines(app) == []
        await pilot.press(*["full_stop"] * 4)  # poll CAP_AT - 1: not yet
        assert limit_lines(app) == []
        await pilot.press("full_stop")  # the change's poll: the playhead's, logged by `_feed`
        assert limit_lines(app) == [f"limits: cap 256 -> 9 ({WHO})"]
        await pilot.press("full_stop", "full_stop")
        assert limit_lines(app) == [f"limits: cap 256 -> 9 ({WHO})"]
        await pilot.press("home")
        assert limit_lines(app) == []


async def test_where_the_gateways_stats_show_the_change_its_event_says_who_not_twice() -> None:
    raws = list(polls()[CAP_AT - 20 : CAP_AT + 20])
    assert raws[20].gateway is not None  # the story's poll, with the event of "demo"
    assert raws[20].events
    app = replay_of(raws)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        assert limit_lines(app) == ["limits: cap 256 -> 9 (by demo)"]


async def test_replay_prometheus_saves_the_past_and_its_file_shows_the_change_too(
    tmp_path: Path,
) -> None:
    """`llmtop replay --prometheus URL --since 30m` replays the past saved as a file."""
    raws = prometheus_like(CAP_AT - 10, CAP_AT + 10)
    targets: dict[str, object] = {"vllm": [], "prometheus": None, "gateway": None}
    recording = recording_of(raws, "prometheus", header(1.0, targets, raws[0].time))
    path = save_recording(recording, tmp_path, "prometheus")
    source, monitor, _ = open_replay(str(path), HealthSettings(), paused=True)
    source.seek_end()
    app = ReplayApp(source, monitor=monitor, health=HealthSettings(), clock=lambda: 0.0)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        assert limit_lines(app) == [f"limits: cap 256 -> 9 ({WHO})"]
