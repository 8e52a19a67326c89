"""The console opened 10 minutes after the onset of the demo's incident starts with the past.

The past comes over HTTP from a small local server answering GET /admin/history in the
gateway's format (a gzip recording, read by `sources.history.gateway_history`): the demo story,
a recorded real run, lengthened in virtual time (tests/support/past_story.py). The live polls
are the same run's next ones, played by a fake collector, so the test takes seconds, not the
11 minutes a real run would. The first frame shows the onset, the finding's first firing and
the cap set before, each marked; the header names the past; `h` hands the past and the live
polls to a replay. A gateway without history is one line in the header and the log.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.past_history import history_app
from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base import format as fmt
from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.record.decode import Recording
from llmtop.recording.replay import ReplaySource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.history import gateway_history
from llmtop.tui import past as tui_past
from llmtop.tui.app import LlmtopApp
from llmtop.tui.past import PastSource
from llmtop.tui.screens.help import HelpScreen
from llmtop.tui.widgets.eventlog import EventLog
from llmtop.tui.widgets.header import StatusHeader
from tests.support import past_story, story
from tests.support.tui import log_texts, notes, until

TOKEN = "s3cret-admin"


class Live:
    """The run's poll at the console's opening, through the collector's pipeline."""

    def __init__(self, first: int) -> None:
        self.pipeline = Pipeline(HealthSettings())
        self.last_raw: RawPoll | None = None
        self.next = first

    async def poll(self) -> Snapshot:
        """The first live poll; later ones never come (the first frame stays as it was)."""
        if self.next > past_story.opened_at():
            await asyncio.Event().wait()
        raw = past_story.polls()[self.next]
        self.next += 1
        self.last_raw = raw
        return self.pipeline.update(raw)

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def gateway() -> Iterator[ServerThread]:
    """/admin/history as the gateway answers it: the run's polls before the opening."""
    past = past_story.polls()[: past_story.opened_at()]
    targets = story.recording().header.get("targets") or {}
    server = ServerThread(history_app(past, targets, TOKEN)).start()
    yield server
    server.stop()


def console(url: str, token: str | None = TOKEN) -> tuple[LlmtopApp, PastSource]:
    engine = past_story.polls()[0].engines[0].url

    async def fetch(since_s: float) -> Recording:
        return await gateway_history(url, token, since_s)

    past = PastSource(
        Live(past_story.opened_at()),
        fetch,
        source="gateway",
        asked_s=3600.0,
        live_urls=[engine],
        wait_s=10.0,  # a loaded box folds slowly: the bound itself is test_past_source.py's
    )
    monitor = MonitorSettings(vllm_urls=(engine,), gateway_url=url, nvml=False)
    return LlmtopApp(past, monitor=monitor, health=HealthSettings(), admin=None, past=past), past


async def test_the_first_frame_shows_the_incident_from_its_onset(gateway: ServerThread) -> None:
    app, past = console(gateway.url)
    polls = past_story.polls()
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, app.first_snapshot.is_set, timeout_s=15)
        await pilot.pause()
        assert past.in_time  # in the first frame, not filled in later
        lines = log_texts(app)
        onset = polls[past_story.ONSET].time
        fired = {e.text.split(" (")[0]: e.time for e in app.events if e.kind == "fired"}
        assert fired["warning degraded-200"] == pytest.approx(onset)  # the onset, 10 min ago
        assert "critical kv-exhausted" in fired  # the finding's first firing
        assert fired["critical kv-exhausted"] - onset < 5
        assert "limits (before you connected): cap 256 -> 9 (by demo)" in lines  # who: the demo
        (connected,) = [i for i, t in enumerate(lines) if t.startswith("connected: ")]
        assert lines[connected].startswith("connected: the lines above are 11m")
        assert all("(before you connected" in t for t in lines[:connected])
        assert polls[-1].time - app.history[0].time >= 595  # the charts' 10 minutes, full
        assert app.snapshot is not None
        watching = Pipeline(HealthSettings())
        along = {r.time: watching.update(r) for r in polls}[app.snapshot.time]
        assert app.snapshot.findings == along.findings  # as a console open since the start
        assert {f.id for f in along.findings} >= {"gateway-saturated"}
        header = app.query_one(StatusHeader).render().plain
        assert "past: gateway 11m of 1h" in header
        shown = app.query_one(EventLog).render().plain
        assert f"{fmt.local_clock(onset)} warning degraded-200 (before you connected" in shown
        assert "cap 256 -> 9" in shown
        assert await until(pilot, lambda: not past.state.loading, timeout_s=30)  # the hour
        await pilot.press("h")
        assert await until(pilot, lambda: app.past_replay is not None, timeout_s=30)
    assert app.past_replay is not None
    times = app.past_replay.recording.times
    assert times[0] == polls[0].time  # the story from its start, and the live
    assert times[-1] >= polls[past_story.opened_at()].time
    assert app.past_replay.computed == len(times)  # ready: the replay opens at once
    assert app.past_replay.playhead().at_end
    assert past.state.error is None


async def test_h_makes_the_replay_off_the_loop_and_keys_go_on_meanwhile(
    gateway: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    making = threading.Event()
    replay_of = tui_past.replay_of

    def slow_replay_of(*args: Any) -> ReplaySource | None:
        making.set()
        assert gate.wait(30)
        return replay_of(*args)

    monkeypatch.setattr(tui_past, "replay_of", slow_replay_of)
    app, past = console(gateway.url)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, app.first_snapshot.is_set, timeout_s=15)
        assert await until(pilot, lambda: not past.state.loading, timeout_s=30)
        await pilot.press("h")
        assert await until(pilot, making.is_set)
        assert "opening the past as a replay…" in notes(app)
        await pilot.press("h")  # while it is made: ignored, and said
        assert "still opening the past (h again is ignored)" in notes(app)
        await pilot.press("question_mark")  # keys go on: the help opens and closes
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        assert app.past_replay is None
        assert app.is_running
        gate.set()
        assert await until(pilot, lambda: app.past_replay is not None, timeout_s=30)
    assert app.past_replay is not None
    assert app.past_replay.playhead().at_end


async def test_quitting_while_the_replay_is_made_stops_it(
    gateway: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops: list[Callable[[], bool]] = []
    stopped = threading.Event()

    def stuck_replay_of(*args: Any) -> ReplaySource | None:
        """Never done, but asks whether to stop as `replay_of` does between polls."""
        stops.append(args[-1])
        while not args[-1]():
            time.sleep(0.01)
        stopped.set()
        return None

    monkeypatch.setattr(tui_past, "replay_of", stuck_replay_of)
    app, _ = console(gateway.url)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, app.first_snapshot.is_set, timeout_s=15)
        await pilot.press("h")
        assert await until(pilot, lambda: bool(stops))
        assert not stops[0]()
        await pilot.press("q")
    assert stopped.wait(5)  # the worker's cancel reached the thread: the exit did not hang
    assert app.past_replay is None
