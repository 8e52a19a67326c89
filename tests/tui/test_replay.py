"""`llmtop replay` in the TUI: playback keys move the displayed time; read-only; no future shown."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from llmtop.recording.reader import read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.tui.replay_app import ReplayApp
from llmtop.tui.widgets.timeline import Timeline
from tests.support import story
from tests.support.report import CAP_AT, T0, URL, write_scripted
from tests.support.tui import log_texts, notes

SIZE = (100, 30)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scripted(tmp_path_factory.mktemp("rec") / "incident.jsonl.gz")


def make_replay(
    path: Path, *, paused: bool = True, interval_s: float = 1.0, clock: Any = None
) -> ReplayApp:
    source = ReplaySource(
        read_recording(path), HealthSettings(), paused=paused, clock=clock or FakeClock()
    )
    return ReplayApp(
        source,
        monitor=MonitorSettings(vllm_urls=(URL,), interval_s=interval_s),
        health=HealthSettings(),
        title=f"llmtop replay: {path.name}",
        clock=lambda: 0.0,
    )


async def ready(app: ReplayApp, pilot: Any) -> None:
    """Wait for the first snapshot and for the background computation of every poll."""
    await app.first_snapshot.wait()
    deadline = time.monotonic() + 30
    while app.replay.computed < len(app.replay.recording) and time.monotonic() < deadline:
        await pilot.pause(0.02)
    assert app.replay.computed == len(app.replay.recording)


def shown(app: ReplayApp) -> float:
    assert app.snapshot is not None
    return app.snapshot.time - T0


def timeline(app: ReplayApp) -> str:
    return str(app.query_one(Timeline).render())


async def test_keys_pause_step_seek_and_speed_move_the_displayed_time(recording: Path) -> None:
    app = make_replay(recording)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        assert shown(app) == 0
        assert "PAUSED" in timeline(app)
        await pilot.press("full_stop", "full_stop", "full_stop")
        assert shown(app) == 3
        await pilot.press("comma")
        assert shown(app) == 2
        await pilot.press("right")
        assert shown(app) == 12
        await pilot.press("left")
        assert shown(app) == 2
        await pilot.press("end")
        assert shown(app) == 179
        assert "180/180" in timeline(app)
        assert "18:02:59 UTC" in timeline(app)
        await pilot.press("home")
        assert shown(app) == 0
        await pilot.press("greater_than_sign", "greater_than_sign", "greater_than_sign")
        assert app.replay.speed == 10
        assert "x10" in timeline(app)
        await pilot.press("less_than_sign")
        assert app.replay.speed == 5
        await pilot.press("space")
        assert not app.replay.paused
        assert "PLAY " in timeline(app)


async def test_playing_advances_with_the_clock_times_speed(recording: Path) -> None:
    clock = FakeClock()
    app = make_replay(recording, paused=False, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        app.replay.speed = 10
        clock.now += 3.0  # 3 s of wall time at x10: 30 s of recording
        deadline = time.monotonic() + 5  # the poll worker polls once a second
        while shown(app) != 30 and time.monotonic() < deadline:
            await pilot.pause(0.02)
        assert shown(app) == 30
        await pilot.press("space")
        clock.now += 100
        await pilot.pause(1.2)
        assert shown(app) == 30


async def test_seeking_back_never_shows_the_future(recording: Path) -> None:
    app = make_replay(recording)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        for _ in range(8):  # to +80 s, inside the KV exhaustion
            await pilot.press("right")
        assert shown(app) == 80
        assert any("fired" not in t and "kv-exhausted" in t for t in log_texts(app))
        assert all(s.time <= T0 + 80 for s in app.history)
        await pilot.press("end")
        assert any("limits" in t and "64 -> 8" in t for t in log_texts(app))
        await pilot.press("home")
        assert shown(app) == 0
        assert not any("kv-exhausted" in t for t in log_texts(app))
        assert not any("64 -> 8" in t for t in log_texts(app))
        assert [s.time for s in app.history] == [T0]
        # stepping forward across the cap extends the log instead of rebuilding it
        await pilot.press("end")
        assert shown(app) == 179
        assert app.snapshot is not None
        assert CAP_AT < 179


async def test_admin_keys_are_read_only(recording: Path) -> None:
    app = make_replay(recording)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("plus", "r")
        await pilot.pause()
        texts = notes(app)
        assert any("read-only: cap +1" in t for t in texts)
        assert any("read-only: recording" in t for t in texts)
        assert app.admin is None
        assert app.monitor.read_only


def test_replay_snapshot_at_the_kv_exhaustion(recording: Path, snap_compare: Any) -> None:
    """The recording is the deterministic source of a TUI snapshot."""
    app = make_replay(recording)

    async def to_the_incident(pilot: Any) -> None:
        await ready(app, pilot)
        for _ in range(9):
            await pilot.press("right")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=to_the_incident)


def test_replay_snapshot_of_the_recorded_story(snap_compare: Any) -> None:
    """The demo story, recorded headless, at the KV exhaustion before the cap (seeked to with
    the keys, 10 s a press).

    120x42 leaves room for every y tick of the charts: where two ticks share a row, plotext
    picks the label by hash order, which changes from run to run.
    """
    app = make_replay(story.STORY)
    presses = int(story.MOMENTS["kv-exhausted"] // 10)

    async def to_the_incident(pilot: Any) -> None:
        await ready(app, pilot)
        for _ in range(presses):
            await pilot.press("right")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 42), run_before=to_the_incident)
