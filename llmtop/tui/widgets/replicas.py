"""The replica table: one row per vLLM replica, worst first, the fleet totals in its title."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.reactive import var

from llmtop.tui.view import replicas as rp
from llmtop.tui.view.present import View
from llmtop.tui.widgets.panel import Panel

MARK = {
    "down": ("✖", "bold red"),
    "critical": ("●", "bold red"),
    "degraded": ("●", "yellow"),
    "ok": ("●", "green"),
    "unknown": ("○", "dim"),
}
FINDING_STYLE = {"critical": "bold red", "warning": "yellow"}
SELECTED = "on grey30"
"""The selected row (where Enter goes): a background that keeps each cell's colour."""


class ReplicaTable(Panel):
    """As many replicas as the height holds, worst first; the selected one highlighted.

    It asks the layout for every row (`get_content_height`) and renders the rows that the
    height it got holds, so it never scrolls and never hides the worst replicas.
    """

    TITLE = "Replicas"
    DEFAULT_CSS = """
    ReplicaTable { overflow: hidden hidden; text-wrap: nowrap; }
    """

    selected: var[str | None] = var(None)
    """The selected replica's key (None: the first row, the worst)."""

    _rows = 0

    def watch_selected(self) -> None:
        self._update(force=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        fleet = rp.fleet_of(self.view.snapshot) if self.view is not None else None
        return 1 + (len(fleet.replicas) if fleet is not None else 1)

    def body(self, view: View) -> Text:
        fleet = rp.fleet_of(view.snapshot)
        if fleet is None:
            return Text("one engine: no replica table", style="dim")
        self.border_title = rp.title(fleet)
        replicas = fleet.replicas
        if len(replicas) != self._rows:  # the height it asks for changed: lay the screen out again
            self._rows = len(replicas)
            self.call_after_refresh(self.refresh, layout=True)
        cols = rp.widths(replicas, self.size.width)
        selected = rp.index_of(fleet, self.selected)
        window = rp.fit(len(replicas), self.size.height, selected)
        lines = [Text(" " * rp.MARK_WIDTH + rp.heading(cols), style="bold dim")]
        for i in range(window.start, window.stop):  # only the rows shown are built and worded
            lines.append(self._line(rp.row(replicas[i]), cols, selected=i == selected))
        if window.above or window.below:
            lines.append(Text(rp.more_line(window), style="dim italic"))
        return Text("\n").join(lines)

    @staticmethod
    def _line(row: rp.Row, cols: tuple[int, ...], *, selected: bool) -> Text:
        glyph, style = MARK[row.mark]
        out = Text.assemble((glyph, style), " ")
        cells = rp.cells(row, cols)
        for i, text in enumerate(cells):
            if i:
                out.append(" ")
            last = i == len(cells) - 1
            out.append(text, FINDING_STYLE.get(row.severity or "", "") if last else "")
        if selected:
            out.stylize(SELECTED)
        return out
