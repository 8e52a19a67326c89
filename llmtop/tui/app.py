"""The llmtop TUI: one long-lived poll worker feeds immutable views to panels that only render.

The app does not know where snapshots come from (`SnapshotSource`: the live Collector, a
recording, a script). The poll worker awaits `source.poll()`, posts a coalescing message and
sleeps to the next deadline, so a slow target never blocks keys and a failing one is shown, not
fatal. Limit changes go to the gateway's admin API on their own worker, one at a time, and every
failure is shown in a notification and in the event log.

Start-up imports what the first frame needs and nothing more (tests/unit/test_import_hygiene.py,
bench/bench_first_frame.py): the help and replica screens, the what-if and the charts (plotext)
are imported when first used; the charts are mounted just after the first frame with figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal
from textual.widget import Widget
from textual.widgets import Footer

from llmtop.core.base.snapshot import Snapshot
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.sources.whatif_feed import WhatIfFeed
from llmtop.tui.controls import Recorder, one_line
from llmtop.tui.messages import PollFailed, SnapshotArrived
from llmtop.tui.view import replicas
from llmtop.tui.view.present import (
    CombinedEngines,
    LogEvent,
    View,
    diff_events,
    is_stale,
    throughput_chart,
    ttft_chart,
)
from llmtop.tui.view.source import SnapshotSource
from llmtop.tui.whatif import WhatIfControls
from llmtop.tui.widgets.commandline import CommandLine
from llmtop.tui.widgets.eventlog import EventLog
from llmtop.tui.widgets.findings import FindingsPanel
from llmtop.tui.widgets.gateway import GatewayPanel
from llmtop.tui.widgets.gpu import GpuPanel
from llmtop.tui.widgets.header import StatusHeader
from llmtop.tui.widgets.kv import KvPanel
from llmtop.tui.widgets.latency import LatencyPanel
from llmtop.tui.widgets.panel import Panel, shown
from llmtop.tui.widgets.replicas import ReplicaTable
from llmtop.tui.widgets.sequences import SequencesPanel
from llmtop.tui.widgets.throughput import ThroughputPanel

if TYPE_CHECKING:
    from llmtop.tui.screens.replica import ReplicaScreen

W = TypeVar("W", bound=Widget)

HISTORY_S = 600.0
"""Seconds of snapshots kept for the charts."""
MAX_EVENTS = 500
CHART_EVERY_S = 5.0
"""Seconds (of snapshot time) between chart redraws; the numbers refresh every poll."""


class LlmtopApp(WhatIfControls):
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
        whatif: WhatIfFeed | None = None,
    ) -> None:
        super().__init__()
        self.whatif = whatif
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
        self._chart_time: float | None = None
        self._recorder_error: str | None = None
        self._admin_lock = asyncio.Lock()
        self.selected_replica: str | None = None
        """The replica table's selection (its key); None: the worst, whichever it is."""
        self._charts: str = "none"
        """The charts' widgets: none yet, pending (to be mounted after this frame), mounted."""
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
            self.call_after_refresh(self._render_charts)
        self.query_one(StatusHeader).recording = bool(getattr(self.recorder, "recording", False))
        self.run_worker(self._poll_loop(), name="poll", group="poll", exit_on_error=False)
        self.set_interval(min(1.0, self.monitor.interval_s), self._tick)

    async def on_unmount(self) -> None:
        closes = (self.source.aclose, self.admin.aclose if self.admin else None)
        for close in (*closes, self.whatif.aclose if self.whatif else None):
            if close is None:
                continue
            with contextlib.suppress(Exception):  # closing never turns an exit into a traceback
                await close()

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
                self.post_message(SnapshotArrived(snap))
            deadline += interval
            now = time.monotonic()
            if deadline < now:  # a slow poll: start again now, do not try to catch up
                deadline = now
            await asyncio.sleep(deadline - now)

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.feed(message.snapshot)
        self._check_recorder()

    def _check_recorder(self) -> None:
        """A recording that stopped on its own (disk full) is said once, not left showing REC."""
        error = getattr(self.recorder, "error", None)
        if error and error != self._recorder_error:
            self._recorder_error = error
            self._failed("recording", str(error))
        rec = self.recorder
        for header in self._widgets(StatusHeader):
            if rec is not None and hasattr(rec, "recording"):
                header.recording = bool(rec.recording)

    def feed(self, snap: Snapshot) -> None:
        """Show one snapshot: history, timeline diff, panels (replay and screenshots call it)."""
        self._feed(snap, charts=None)

    def _feed(self, snap: Snapshot, *, charts: bool | None) -> None:
        """`feed`; charts redraw every CHART_EVERY_S of snapshot time, or when time went back.

        A 10-minute chart gains nothing from a 1 s redraw, which costs more than all the panels
        together; `charts` forces (True) or skips (False) the redraw.
        """
        prev = self.snapshot
        snap = self._after_changes_here(snap)
        self.snapshot = snap
        self.poll_error = None
        self._arrived_at = self._clock()
        if not self.history or snap.time > self.history[-1].time:
            self.history.append(snap)
        self.log_events(*diff_events(prev, snap))
        if charts is None:
            last = self._chart_time
            charts = last is None or snap.time < last or snap.time - last >= CHART_EVERY_S
        self._render_all(charts=charts)
        self.first_snapshot.set()

    def on_poll_failed(self, message: PollFailed) -> None:
        if self.poll_error != message.error:
            self.log_events(LogEvent(time.time(), "error", f"poll failed: {message.error}"))
        self.poll_error = message.error
        self._render_all(charts=False)

    def _tick(self) -> None:
        """Keep the age and the stale mark true while no poll arrives."""
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
        fleet = replicas.fleet_of(view.snapshot)
        if self.screen_stack and self.screen_stack[0].has_class("-fleet") != (fleet is not None):
            self._fleet_layout(fleet is not None)
        for header in self._widgets(StatusHeader):  # none while starting or shutting down
            header.view = view
        for panel in self._widgets(Panel):
            if shown(panel):  # a hidden one gets the view when the layout shows it
                panel.view = view
        if charts:
            self._render_charts()
        self._render_replica(view, charts=charts)

    # -- the fleet --------------------------------------------------------------------------

    def _fleet_layout(self, fleet: bool) -> None:
        """The replica table in place of the panels (app.tcss: -fleet), mounted the first time
        a fleet shows, so that one engine's screen has not a widget more."""
        main = self.screen_stack[0]
        main.set_class(fleet, "-fleet")
        if fleet and not main.query(ReplicaTable):
            main.mount(ReplicaTable(id="replicas"), after=main.query_one("#findings"))
        if not fleet:  # the panels skipped while hidden: fill them once they show
            self.call_after_refresh(self._render_all, charts=True)
        self.refresh_bindings()  # the replica keys work only for a fleet

    def _render_replica(self, view: View, *, charts: bool) -> None:
        """The open replica's full view, on that replica's own figures, findings, history."""
        screen = self._replica_screen()
        if screen is None:
            return
        fleet = replicas.fleet_of(view.snapshot)
        key = (
            fleet.replicas[replicas.index_of(fleet, self.selected_replica)].key
            if fleet is not None and fleet.replicas
            else None
        )
        r = replicas.find(fleet, key)
        if r is None:
            return
        own = replace(
            view,
            snapshot=replicas.replica_snapshot(view.snapshot, r),
            engine=r.stats,
            history=replicas.replica_history(self.history, r.key),
        )
        screen.show(r.name, own, charts=charts)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The replica keys exist only for a fleet (a single engine's footer is unchanged)."""
        if action in ("select_replica", "open_replica"):
            fleet = replicas.fleet_of(self.snapshot) is not None
            return fleet and not (action == "open_replica" and self._replica_screen() is not None)
        return True

    def action_select_replica(self, step: int) -> None:
        fleet = replicas.fleet_of(self.snapshot)
        if fleet is None or not fleet.replicas:
            return
        i = replicas.index_of(fleet, self.selected_replica) + step
        self.selected_replica = fleet.replicas[max(0, min(i, len(fleet.replicas) - 1))].key
        for table in self._widgets(ReplicaTable):
            table.selected = self.selected_replica
        self._render_all(charts=True)

    def action_open_replica(self) -> None:
        fleet = replicas.fleet_of(self.snapshot)
        if fleet is None or not fleet.replicas or self._replica_screen() is not None:
            return
        from llmtop.tui.screens.replica import ReplicaScreen

        r = fleet.replicas[replicas.index_of(fleet, self.selected_replica)]
        self.selected_replica = r.key
        self.push_screen(ReplicaScreen(r.name))
        self.call_after_refresh(self._render_all, charts=True)

    def _replica_screen(self) -> ReplicaScreen | None:
        """The replica screen on top, if one is; its module is imported when the first opens,
        so before that none can be."""
        module = sys.modules.get("llmtop.tui.screens.replica")
        screen = self.screen_stack[-1] if self.screen_stack else None
        return screen if module is not None and isinstance(screen, module.ReplicaScreen) else None

    def _mount_charts(self) -> None:
        """The two charts, once the first frame with figures is on screen: plotext and the
        first figures (~30 ms each) wait until after it."""
        from llmtop.tui.widgets.chart import TimeChart

        boxes: list[Widget] = self._widgets("#charts")
        if boxes and self._charts == "pending":
            boxes[0].mount(TimeChart(id="ttft-chart"), TimeChart(id="tput-chart"))
            self._charts = "mounted"
            self.call_after_refresh(self._render_charts)

    def _render_charts(self) -> None:
        charts: list[Widget] = self._widgets("#charts")
        if not charts or not charts[0].display or not self.history:
            return
        if self._charts != "mounted":
            if self._charts == "none":
                self._charts = "pending"
                self.call_after_refresh(self._mount_charts)
            return
        from llmtop.tui.widgets.chart import TimeChart

        self._chart_time = self.history[-1].time
        ttft = self.screen_stack[0].query_one("#ttft-chart", TimeChart)
        tput = self.screen_stack[0].query_one("#tput-chart", TimeChart)
        # two braille dots per cell: more points than that cost CPU and show nothing
        slo, of = self.health.slo.ttft_s, self.engine_of
        ttft.data = ttft_chart(self.history, slo, 2 * ttft.size.width, engine_of=of)
        tput.data = throughput_chart(self.history, 2 * tput.size.width, engine_of=of)

    def on_resize(self) -> None:
        self.call_after_refresh(self._render_charts)

    def log_events(self, *events: LogEvent) -> None:
        if not events:
            return
        self.events.extend(events)
        for log in self._widgets(EventLog):
            log.events = tuple(self.events)

    def action_help(self) -> None:
        from llmtop.tui.screens.help import HelpScreen

        self.push_screen(HelpScreen())
