"""The llmtop TUI: one long-lived poll worker feeds immutable views to panels that only render.

The app knows only a `SnapshotSource` and owns the parts it calls (keys, controls, whatif,
replica_nav); start-up imports only what the first frame needs (test_import_hygiene.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal
from textual.widget import Widget
from textual.widgets import Footer, Input

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.charts import Charts
from llmtop.tui.controls import AdminControls, Recorder, one_line
from llmtop.tui.keys import KeyRouter
from llmtop.tui.messages import PollFailed, SnapshotArrived
from llmtop.tui.past import PastSource
from llmtop.tui.past_controls import LimitAuthors, PastControls
from llmtop.tui.replica_nav import ReplicaNavigator
from llmtop.tui.view.caps import candidate_caps
from llmtop.tui.view.chart_data import CombinedEngines
from llmtop.tui.view.past import poll_lines
from llmtop.tui.view.present import (
    LogEvent,
    View,
    is_stale,
)
from llmtop.tui.view.source import SnapshotSource, WhatIfSource
from llmtop.tui.whatif_controls import WhatIfControls
from llmtop.tui.widgets.commandline import CommandLine
from llmtop.tui.widgets.eventlog import EventLog
from llmtop.tui.widgets.findings import FindingsPanel
from llmtop.tui.widgets.gateway import GatewayPanel
from llmtop.tui.widgets.gpu import GpuPanel
from llmtop.tui.widgets.header import StatusHeader
from llmtop.tui.widgets.kv import KvPanel
from llmtop.tui.widgets.latency import LatencyPanel
from llmtop.tui.widgets.panel import Panel, shown
from llmtop.tui.widgets.sequences import SequencesPanel
from llmtop.tui.widgets.throughput import ThroughputPanel

if TYPE_CHECKING:
    from llmtop.recording.replay import ReplaySource

W = TypeVar("W", bound=Widget)

HISTORY_S = 600.0
"""Seconds of snapshots kept for the charts."""
MAX_EVENTS = 500


class LlmtopApp(App[int]):
    """Health at a glance, the bottleneck named, admission limits one key away."""

    CSS_PATH = "app.tcss"
    TITLE = "llmtop"
    ENABLE_COMMAND_PALETTE = False
    AUTO_FOCUS = None
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012 (textual's type)
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]  # noqa: RUF012

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("plus,equals_sign", "cap(1)", "cap+", key_display="+"),
        Binding("minus,underscore", "cap(-1)", "cap-", key_display="-"),
        Binding("right_square_bracket", "queue(1)", "queue+", key_display="]"),
        Binding("left_square_bracket", "queue(-1)", "queue-", key_display="["),
        Binding("colon", "command", "cmd", key_display=":"),
        Binding("p", "pause", "pause"),
        Binding("a", "autopilot", "auto"),
        Binding("A", "apply_suggestion", "apply", show=False),
        Binding("w", "whatif", "what-if"),
        Binding("r", "record", "rec", show=False),
        Binding("h", "past", "past", show=False),
        # the replica keys: their hint is in the table's headings (the footer is full at 80)
        Binding("up,k", "select_replica(-1)", "replica", show=False),
        Binding("down,j", "select_replica(1)", "", show=False),
        Binding("enter", "open_replica", "open", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
    ]

    def __init__(
        self,
        source: SnapshotSource,
        *,
        monitor: MonitorSettings,
        health: HealthSettings,
        admin: AdminClient | None,
        title: str | None = None,
        recorder: Recorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        history: Sequence[Snapshot] = (),
        exit_after_s: float | None = None,
        past: PastSource | None = None,
        last_raw: Callable[[], RawPoll | None] | None = None,
    ) -> None:
        super().__init__()
        self.authors = LimitAuthors(last_raw)
        """Who made the live polls' limit changes (`last_raw`: the collector's raw inputs)."""
        self.pasts = PastControls(self, self, past)
        """The console's past (the gateway's history, Prometheus'): taken as it comes; `h`."""
        self.source = source
        self.monitor = monitor
        self.health = health
        self.admin = admin
        self.recorder = recorder
        if title:
            self.title = title
        self._clock = clock
        self.history: deque[Snapshot] = deque(
            maxlen=max(2, int(HISTORY_S / max(monitor.interval_s, 0.1)) + 1)
        )
        self.engine_of = CombinedEngines(size=(self.history.maxlen or 0) + 1)
        """A snapshot's engines combined, once per snapshot (the view and the charts)."""
        self.events: deque[LogEvent] = deque(maxlen=MAX_EVENTS)
        self.snapshot: Snapshot | None = None
        self.poll_error: str | None = None
        self._arrived_at: float | None = None
        self._stale = False
        self._preload = tuple(history)
        self._recorder_error: str | None = None
        self._exit_after_s = exit_after_s
        self.whatif = WhatIfControls(
            self, source if isinstance(source, WhatIfSource) else None, self.candidate_caps
        )
        self.controls = AdminControls(
            self,
            admin,
            read_only=monitor.read_only,
            recorder=recorder,
            log=self.log_events,
            changed=self._show_changes_here,
            line_closed=self.whatif.hide_preview,
        )
        self.keys = KeyRouter(
            self,
            open_line=self.controls.open_line,
            run_line=self.controls.run_line,
            close_line=self.controls.close_line,
        )
        self.replica_nav = ReplicaNavigator(
            self, lambda: self.snapshot, partial(self._render_all, charts=True)
        )
        self.charts = Charts(self, self.history, health.slo.ttft_s, self.engine_of)
        self.first_snapshot = asyncio.Event()
        """Set once the first snapshot is on screen (tests and screenshots wait on it)."""

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield FindingsPanel(id="findings")
        with Grid(id="panels"):
            yield KvPanel(id="kv")
            yield SequencesPanel(id="sequences")
            yield LatencyPanel(id="latency")
            yield GatewayPanel(id="gateway")
            yield ThroughputPanel(id="throughput")
            yield GpuPanel(id="gpu")
        yield Horizontal(id="charts")  # its TimeCharts are mounted after the first frame
        yield EventLog(id="events")
        yield CommandLine(
            placeholder=": cap 8 · queue 64 · timeout 20 · rpm 600|off · Enter runs, Esc closes",
            id="cmdline",
        )
        yield Footer(compact=True)

    def _widgets(self, selector: type[W] | str) -> list[W]:
        """Widgets of the dashboard screen, also under help or a question; none at shutdown."""
        if not self.screen_stack:
            return []
        return list(self.screen_stack[0].query(selector))  # type: ignore[arg-type]

    def on_mount(self) -> None:
        for snap in self._preload:  # a replay's past, or a screenshot's story
            self._feed(snap, charts=False)
        if self._preload:
            self.call_after_refresh(self.charts.render)
        self.query_one(StatusHeader).recording = bool(getattr(self.recorder, "recording", False))
        self.pasts.show_label()
        self.run_worker(self._poll_loop(), name="poll", group="poll", exit_on_error=False)
        self.set_interval(min(1.0, self.monitor.interval_s), self._tick)
        if self._exit_after_s is not None:
            self.set_timer(self._exit_after_s, partial(self.exit, 0))

    async def on_unmount(self) -> None:
        for close in (self.source.aclose, self.admin.aclose if self.admin else None):
            if close is None:
                continue
            with contextlib.suppress(Exception):  # closing never turns an exit into a traceback
                await close()

    # -- keys: every one goes to the router; the bindings' actions call the parts ----------

    async def on_event(self, event: events.Event) -> None:
        if not await self.keys.take(event):
            await super().on_event(event)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.whatif.line_changed(event.input)

    def action_cap(self, delta: int) -> None:
        self.controls.cap(delta)

    def action_queue(self, direction: int) -> None:
        self.controls.queue(direction)

    def action_command(self) -> None:
        self.controls.open_line()

    def action_pause(self) -> None:
        self.controls.pause()

    def action_autopilot(self) -> None:
        self.controls.autopilot()

    def action_apply_suggestion(self) -> None:
        self.controls.apply_suggestion()

    def action_record(self) -> None:
        self.controls.record()

    def action_whatif(self) -> None:
        self.whatif.open_screen()

    def action_select_replica(self, step: int) -> None:
        self.replica_nav.select(step)

    def action_open_replica(self) -> None:
        self.replica_nav.open()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The replica keys exist only for a fleet (a single engine's footer is unchanged)."""
        return self.replica_nav.allows(action)

    def action_help(self) -> None:
        from llmtop.tui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def candidate_caps(self) -> tuple[int, ...]:
        """The caps the what-if predicts now, from the latest snapshot and history."""
        return candidate_caps(self.snapshot, self.history, self.health.kv_target_frac)

    def _show_changes_here(self) -> None:
        """A change made here shows now, not at the next poll."""
        if self.snapshot is not None:
            self.snapshot = self.controls.with_changes_here(self.snapshot)
            self._render_all(charts=False)

    # -- polling --------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        """The one poll worker: poll, post, sleep to the next deadline; never cancelled per tick."""
        interval = max(self.monitor.interval_s, 0.05)
        deadline = time.monotonic()
        while True:
            try:
                snap = await self.source.poll()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a failing source is shown, never fatal
                self.post_message(PollFailed(one_line(e)))
            else:
                self.authors.polled()
                self.post_message(SnapshotArrived(snap))
            deadline += interval
            now = time.monotonic()
            if deadline < now:  # a slow poll: start again now, do not try to catch up
                deadline = now
            await asyncio.sleep(deadline - now)

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.pasts.take()
        self.feed(message.snapshot)
        self._check_recorder()

    def _check_recorder(self) -> None:
        """A recording that stopped on its own (disk full) is said once, not left showing REC."""
        error = getattr(self.recorder, "error", None)
        if error and error != self._recorder_error:
            self._recorder_error = error
            self.controls.failed("recording", str(error))
        rec = self.recorder
        for header in self._widgets(StatusHeader):
            if rec is not None and hasattr(rec, "recording"):
                header.recording = bool(rec.recording)

    def feed(self, snap: Snapshot) -> None:
        """Show one snapshot: history, timeline diff, panels (replay and screenshots call it)."""
        self._feed(snap, charts=None)

    def _feed(self, snap: Snapshot, *, charts: bool | None) -> None:
        """`feed`; `charts` redraws them (True), skips them (False), or when due (None)."""
        prev = self.snapshot
        snap = self.controls.with_changes_here(snap)
        self.snapshot = snap
        self.poll_error = None
        self._arrived_at = self._clock()
        if not self.history or snap.time > self.history[-1].time:
            self.history.append(snap)
        self.log_events(*poll_lines(prev, snap, self._events_for(prev, snap)))
        self._render_all(charts=self.charts.due(snap.time) if charts is None else charts)
        self.first_snapshot.set()

    def _events_for(self, prev: Snapshot | None, snap: Snapshot) -> Sequence[Mapping[str, Any]]:
        """The gateway's events that go with `snap`, who made its changes (a replay's own)."""
        return self.authors.events_for(prev, snap)

    def on_poll_failed(self, message: PollFailed) -> None:
        if self.poll_error != message.error:
            self.log_events(LogEvent(time.time(), "error", f"poll failed: {message.error}"))
        self.poll_error = message.error
        self._render_all(charts=False)

    def _tick(self) -> None:
        """Keep the age and the stale mark true while no poll arrives; a late past fills in."""
        if self.snapshot is not None:
            self.pasts.take()
        view = self.view()
        if view is None:
            return
        if view.stale != self._stale:
            self._render_all(charts=False)
        elif view.age_s is not None and view.age_s > 1.5 * self.monitor.interval_s:
            # a late poll: show the age growing (on time, the header keeps the arrival age)
            for header in self._widgets(StatusHeader):  # none while shutting down
                header.view = view

    def view(self) -> View | None:
        """The current moment as the panels see it."""
        if self.snapshot is None:
            return None
        age = None if self._arrived_at is None else self._clock() - self._arrived_at
        return View(
            snapshot=self.snapshot,
            engine=self.engine_of(self.snapshot),
            age_s=age,
            stale=is_stale(age, self.monitor.interval_s) or self.poll_error is not None,
            interval_s=self.monitor.interval_s,
            ttft_slo_s=self.health.slo.ttft_s,
            itl_slo_s=self.health.slo.itl_s,
            queue_wait_slo_s=self.health.queue_wait_slo_s,
            read_only=self.monitor.read_only,
            poll_error=self.poll_error,
            history=tuple(self.history),  # the KV panel sizes a slot over the last minute
            kv_target_frac=self.health.kv_target_frac,
        )

    def _render_all(self, *, charts: bool) -> None:
        view = self.view()
        if view is None:
            return
        self._stale = view.stale
        self.replica_nav.layout(view.snapshot)
        for header in self._widgets(StatusHeader):  # none while starting or shutting down
            header.view = view
        for panel in self._widgets(Panel):
            if shown(panel):  # a hidden one gets the view when the layout shows it
                panel.view = view
        if charts:
            self.charts.render()
        self.replica_nav.show(view, self.history, charts=charts)

    # -- the past: its own part (past_controls.py) -------------------------------------------

    @property
    def past_replay(self) -> ReplaySource | None:
        """Set by `h` before the app exits: the past as a replay, ready (launch.py runs it)."""
        return self.pasts.replay

    def action_past(self) -> None:
        self.pasts.open()

    def on_resize(self) -> None:
        self.call_after_refresh(self.charts.render)

    def log_events(self, *events: LogEvent) -> None:
        if not events:
            return
        self.events.extend(events)
        for log in self._widgets(EventLog):
            log.events = tuple(self.events)
