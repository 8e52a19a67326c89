"""A fleet's replicas on screen: the table in place of the panels, its selection, and one
replica's own screen (Enter), kept on that replica's figures at every poll."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual.app import App

from llmtop.core.base.snapshot import Snapshot
from llmtop.tui.view import replicas
from llmtop.tui.view.present import View
from llmtop.tui.widgets.replicas import ReplicaTable

if TYPE_CHECKING:
    from llmtop.tui.screens.replica import ReplicaScreen

REPLICA_ACTIONS = ("select_replica", "open_replica")


class ReplicaNavigator:
    """Owned by the app: `snapshot` is its latest snapshot, `rerender` redraws everything."""

    def __init__(
        self, app: App[Any], snapshot: Callable[[], Snapshot | None], rerender: Callable[[], None]
    ) -> None:
        self.app = app
        self._snapshot = snapshot
        self._rerender = rerender
        self.selected: str | None = None
        """The table's selection (a replica's key); None: the worst, whichever it is."""

    def layout(self, snap: Snapshot) -> None:
        """The replica table in place of the panels (app.tcss: -fleet) when `snap` is a fleet,
        mounted the first time one shows, so that one engine's screen has not a widget more."""
        app = self.app
        fleet = replicas.fleet_of(snap) is not None
        if not app.screen_stack or app.screen_stack[0].has_class("-fleet") == fleet:
            return
        main = app.screen_stack[0]
        main.set_class(fleet, "-fleet")
        if fleet and not main.query(ReplicaTable):
            main.mount(ReplicaTable(id="replicas"), after=main.query_one("#findings"))
        if not fleet:  # the panels skipped while hidden: fill them once they show
            app.call_after_refresh(self._rerender)
        app.refresh_bindings()  # the replica keys work only for a fleet

    def allows(self, action: str) -> bool:
        """The replica keys exist only for a fleet, and Enter only off a replica's screen."""
        if action not in REPLICA_ACTIONS:
            return True
        fleet = replicas.fleet_of(self._snapshot()) is not None
        return fleet and not (action == "open_replica" and self.screen() is not None)

    def select(self, step: int) -> None:
        """↑/↓: move the selection `step` rows, within the table."""
        fleet = replicas.fleet_of(self._snapshot())
        if fleet is None or not fleet.replicas:
            return
        i = replicas.index_of(fleet, self.selected) + step
        self.selected = fleet.replicas[max(0, min(i, len(fleet.replicas) - 1))].key
        for table in self.app.screen_stack[0].query(ReplicaTable) if self.app.screen_stack else ():
            table.selected = self.selected
        self._rerender()

    def open(self) -> None:
        """Enter: the selected replica's own screen."""
        fleet = replicas.fleet_of(self._snapshot())
        if fleet is None or not fleet.replicas or self.screen() is not None:
            return
        from llmtop.tui.screens.replica import ReplicaScreen

        r = fleet.replicas[replicas.index_of(fleet, self.selected)]
        self.selected = r.key
        self.app.push_screen(ReplicaScreen(r.name))
        self.app.call_after_refresh(self._rerender)

    def screen(self) -> ReplicaScreen | None:
        """The replica screen on top, if one is (its module is imported when the first opens,
        so before that none can be)."""
        module = sys.modules.get("llmtop.tui.screens.replica")
        stack = self.app.screen_stack
        top = stack[-1] if stack else None
        return top if module is not None and isinstance(top, module.ReplicaScreen) else None

    def show(self, view: View, history: Sequence[Snapshot], *, charts: bool) -> None:
        """The open replica's full view, on that replica's own figures, findings, history."""
        screen = self.screen()
        if screen is None:
            return
        fleet = replicas.fleet_of(view.snapshot)
        key = (
            fleet.replicas[replicas.index_of(fleet, self.selected)].key
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
            history=replicas.replica_history(history, r.key),
        )
        screen.show(r.name, own, charts=charts)
