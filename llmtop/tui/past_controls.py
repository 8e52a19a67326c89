"""The live console's past and the 'who' of its limit changes, owned by the app.

`PastControls`: the past as it comes in (the header's words, its snapshots in the charts, its
lines atop the log) and `h`, the past as a replay. `LimitAuthors`: the gateway's events of the
live polls, kept until the poll whose stats show their change, so its line says who made it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from textual.app import App
from textual.widget import Widget

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.settings import HealthSettings
from llmtop.tui.controls import one_line
from llmtop.tui.past import PastSource, PastUpdate, Stop
from llmtop.tui.view.past import connected_line, past_events, past_label, shown_by
from llmtop.tui.view.present import LogEvent
from llmtop.tui.widgets.header import StatusHeader
from llmtop.tui.work import start_worker

if TYPE_CHECKING:
    from llmtop.recording.replay import ReplaySource

W = TypeVar("W", bound=Widget)


class Console(Protocol):
    """What of the app the past fills (the app itself: typed so, this module imports no app)."""

    health: HealthSettings
    history: deque[Snapshot]
    events: deque[LogEvent]
    snapshot: Snapshot | None

    def log_events(self, *events: LogEvent) -> None: ...

    def _widgets(self, selector: type[W] | str) -> list[W]: ...

    def _render_all(self, *, charts: bool) -> None: ...


WHO_WAIT_S = 10.0
"""The most a gateway's event waits for the poll whose stats show its change."""


class LimitAuthors:
    """Who made the live polls' limit changes: `last_raw` is the last poll's raw inputs (the
    collector's), whose gateway's events say who made a change."""

    def __init__(self, last_raw: Callable[[], RawPoll | None] | None) -> None:
        self._last_raw = last_raw
        self._waiting: list[tuple[float, Mapping[str, Any]]] = []
        """(poll time, event) of the live polls' gateway events not yet on a line."""

    def polled(self) -> None:
        """After each poll (kept at once: a snapshot may replace another before it shows)."""
        raw = self._last_raw() if self._last_raw is not None else None
        if raw is not None and raw.events:
            self._waiting += [(raw.time, e) for e in raw.events]

    def events_for(self, prev: Snapshot | None, snap: Snapshot) -> Sequence[Mapping[str, Any]]:
        """The gateway's /admin/events entries that go with `snap`: those of the live polls up
        to it whose change it shows (`shown_by`: who made it). The collector reads the stats,
        then the events: a change between the two comes as an event one poll before the stats
        show it, so an event waits for its change up to `WHO_WAIT_S`."""
        if not self._waiting:
            return ()
        events = [e for t, e in self._waiting if t <= snap.time]
        shown = shown_by(prev, snap, events)
        self._waiting = [
            (t, e)
            for t, e in self._waiting
            if t > snap.time - WHO_WAIT_S and not any(e is s for s in shown)
        ]
        return shown


class PastControls:
    """The console's past (the gateway's history, Prometheus'), taken as it comes, and `h`."""

    def __init__(self, app: App[Any], console: Console, past: PastSource | None) -> None:
        self.app = app
        self.console = console
        """The same app, as what the past fills."""
        self.past = past
        self.replay: ReplaySource | None = None
        """Set by `h` before the app exits: the past as a replay, ready (launch.py runs it)."""
        self._opening = False
        """`h` is making the replay (a second `h` meanwhile is ignored)."""
        self._lines = 0
        """How many lines atop the log are the past's."""

    def take(self) -> None:
        """Show what is new of the past: the header's words, and once it is in, its snapshots
        in the charts, its events marked in the log before the live ones."""
        update = self.past.take() if self.past is not None else None
        if update is None:
            return
        self.show_label()
        if update.snapshots:
            self._fill(update)
        self.console.log_events(*update.lines)

    def show_label(self) -> None:
        label = past_label(self.past.state) if self.past is not None else ""
        for header in self.console._widgets(StatusHeader):
            header.past = label

    def _fill(self, update: PastUpdate) -> None:
        """The past's snapshots in the charts and its lines atop the log (instead of an earlier,
        shorter past's: the recent past comes first, the rest of the hour after it)."""
        app = self.console
        live_events = list(app.events)[self._lines :]
        past = update.snapshots
        connected = connected_line(past[-1].time, update.state, len(past))
        lines = [*past_events(past, update.who, update.unseen), connected]
        self._lines = len(lines)
        app.events.clear()
        app.log_events(*lines, *live_events)
        app.history.clear()
        app.history.extend((*past, *update.live))
        app.snapshot = (update.live or past)[-1]
        app._render_all(charts=True)

    def open(self) -> None:
        """`h`: the past and what came since as a replay (launch.py runs it, then live again).
        Making it (an hour: seconds of decoding, encoding, folding) is a thread's (a worker
        awaits it): the live console goes on meanwhile, saying so, and leaves for the replay
        once it is ready. A second `h` meanwhile is ignored, and said to be."""
        app = self.app
        if self._opening:
            app.notify("still opening the past (h again is ignored)", timeout=2)
            return
        if self.past is None or self.past.held < 2:
            why = past_label(self.past.state) if self.past is not None else "past: off"
            app.notify(f"no past to replay ({why})", severity="warning", timeout=3)
            return
        self._opening = True
        app.notify("opening the past as a replay…", timeout=120)
        make = self.past.replay_maker(self.console.health)
        why = past_label(self.past.state)
        start_worker(app, partial(self._open, make, why), name="past", exit_on_error=False)

    async def _open(self, make: Callable[[Stop], ReplaySource | None], why: str) -> None:
        """The `h` key's worker: the replay made on a thread (`recording.background`), then
        the app exits for it (launch.py runs it). Cancelled (the app quits): the thread is told
        to stop, and nothing waits for it."""
        from llmtop.recording.background import in_background

        app = self.app
        made, stop = in_background(make, name="llmtop-past")
        try:
            replay = await made
        except asyncio.CancelledError:
            stop()
            raise
        except Exception as e:  # a bug must not leave `h` dead or reach the terminal
            replay, why = None, one_line(e)
        finally:
            self._opening = False
        app.clear_notifications()
        if replay is None:
            app.notify(f"no past to replay ({why})", severity="warning", timeout=3)
            return
        self.replay = replay
        app.exit(0)
