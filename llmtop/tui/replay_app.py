"""`llmtop replay`: the same TUI on a recording, read-only, with a timeline and playback keys.

`ReplayApp` is the live app on a `ReplaySource`; whatever moves the playhead, the charts and the
event log are rebuilt up to it, so seeking back never shows the future. Keys: docs/recording.md.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType

from llmtop.core.base.snapshot import Snapshot
from llmtop.recording.replay import SEEK_S, ReplaySource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.tui import app as app_module
from llmtop.tui.app import HISTORY_S, LlmtopApp
from llmtop.tui.view.past import poll_lines
from llmtop.tui.view.present import LogEvent
from llmtop.tui.widgets.eventlog import EventLog
from llmtop.tui.widgets.timeline import Timeline

INCREMENTAL_MAX = 600
"""Polls moved forward at most, for the event log to be extended rather than rebuilt."""


class ReplayApp(LlmtopApp):
    """The TUI on a recording: findings recomputed with the current rules, nothing changeable."""

    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))
    """The live app's layout (a relative CSS_PATH would be looked up beside this module)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space,p", "play_pause", "play/pause", key_display="space"),
        Binding("left", "seek(-1)", f"-{SEEK_S:g}s", key_display="←"),
        Binding("right", "seek(1)", f"+{SEEK_S:g}s", key_display="→"),
        Binding("comma", "step(-1)", "step-", key_display=","),
        Binding("full_stop", "step(1)", "step+", key_display="."),
        Binding("home", "seek_start", "start", show=False),
        Binding("end", "seek_end", "end", show=False),
        Binding("less_than_sign", "speed(-1)", "slower", key_display="<"),
        Binding("greater_than_sign", "speed(1)", "faster", key_display=">"),
        # the live app's admin keys: shown nowhere, they only say why nothing happens
        Binding("plus,equals_sign", "read_only('cap +1')", "", show=False),
        Binding("minus,underscore", "read_only('cap -1')", "", show=False),
        Binding("right_square_bracket", "read_only('queue +')", "", show=False),
        Binding("left_square_bracket", "read_only('queue -')", "", show=False),
        Binding("colon", "read_only('the command line')", "", show=False),
        Binding("r", "read_only('recording')", "", show=False),
        Binding("h", "back_to_live", "live"),
    ]

    def __init__(
        self,
        source: ReplaySource,
        *,
        monitor: MonitorSettings,
        health: HealthSettings,
        title: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        live_key: bool = False,
    ) -> None:
        read_only = replace(monitor, read_only=True, admin_token=None, record=None)
        super().__init__(
            source, monitor=read_only, health=health, admin=None, title=title, clock=clock
        )
        self.replay = source
        self._shown: int | None = None
        self._feeding: int | None = None
        """The playhead's poll while `feed` shows it (the live app's `_feed` asks its events)."""
        self._events: dict[int, tuple[dict[str, Any], ...]] = {}
        self.live_key = live_key
        """`h` goes back to live: the live console opened this replay of its past."""
        self.back_to_live = False

    def on_mount(self) -> None:
        # the live app's on_mount (poll worker, tick) runs too: Textual dispatches up the MRO
        self.replay.start_background()

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield Timeline(id="timeline")

    def feed(self, snap: Snapshot) -> None:
        """Show the playhead's moment (a poll's snapshot may be older than a key's move)."""
        if not self.query(Timeline):
            return  # a poll that arrives while the app shuts down
        replay = self.replay
        index = replay.index
        window = replay.history(HISTORY_S)
        shown, self._shown = self._shown, index
        if shown is not None and shown <= index <= shown + INCREMENTAL_MAX:
            if index > shown:  # played forward: log what happened between the two moments
                self.log_events(*(e for j in range(shown + 1, index) for e in self._lines(j)))
                self.snapshot = replay.snapshot(index - 1)
            else:  # the same moment again (paused): nothing new
                self.snapshot = replay.snapshot(index)
        else:  # a jump: the log the window before the playhead would have built
            self.events.clear()
            self.query_one(EventLog).events = ()
            first = index - len(window) + 1
            self.log_events(*(e for j in range(first + 1, index) for e in self._lines(j)))
            self.snapshot = window[-2] if len(window) > 1 else None
        self.history.clear()
        self.history.extend(window[:-1])
        self._feeding = index if index != shown else None  # paused: its lines are in
        try:
            super().feed(window[-1])
        finally:
            self._feeding = None
        self.query_one(Timeline).playhead = replay.playhead()

    def _lines(self, j: int) -> list[LogEvent]:
        """Poll `j`'s lines: what changed since poll `j - 1`, with its gateway's events."""
        prev = self.replay.snapshot(j - 1) if j > 0 else None
        return poll_lines(prev, self.replay.snapshot(j), self._events_at(j))

    def _events_for(self, prev: Snapshot | None, snap: Snapshot) -> Sequence[Mapping[str, Any]]:
        """The playhead's poll's events (`feed` shows the playhead's snapshot last)."""
        return () if self._feeding is None else self._events_at(self._feeding)

    def _events_at(self, j: int) -> tuple[dict[str, Any], ...]:
        """Poll `j`'s `RawPoll.events` (limit changes: the gateway's, who made them; Prometheus'
        range, the changes themselves), read once; a line without any is not decoded."""
        if j not in self._events:
            line = self.replay.recording.lines[j]
            events: tuple[dict[str, Any], ...] = ()
            if b'"events"' in line:  # any spacing; nested ones cost a decode only
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    found = json.loads(line).get("events") or ()
                    events = tuple(e for e in found if isinstance(e, dict))
            self._events[j] = events
        return self._events[j]

    def _moved(self) -> None:
        self.feed(self.replay.current())

    def action_play_pause(self) -> None:
        self.replay.toggle_pause()
        self._moved()

    def action_seek(self, direction: int) -> None:
        self.replay.seek(direction * SEEK_S)
        self._moved()

    def action_step(self, polls: int) -> None:
        self.replay.step(polls)
        self._moved()

    def action_seek_start(self) -> None:
        self.replay.seek_start()
        self._moved()

    def action_seek_end(self) -> None:
        self.replay.seek_end()
        self._moved()

    def action_speed(self, direction: int) -> None:
        speed = self.replay.faster() if direction > 0 else self.replay.slower()
        self.notify(f"replay speed x{speed:g}", timeout=2)
        self._moved()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back_to_live":
            return self.live_key
        return super().check_action(action, parameters)

    def action_back_to_live(self) -> None:
        self.back_to_live = True
        self.exit(0)

    def action_read_only(self, what: str) -> None:
        self.notify(f"replay is read-only: {what} is disabled", severity="warning", timeout=3)
