"""The incident timeline: limit changes, findings firing and clearing, failed changes."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from llmtop.core.base import format as fmt
from llmtop.tui.view.present import LogEvent

KIND_STYLE = {
    "fired": "yellow",
    "cleared": "green",
    "limit": "cyan",
    "change": "bold cyan",
    "error": "bold red",
    "info": "",
}


class EventLog(Widget):
    """The newest events at the bottom; as many as fit."""

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
        min-height: 2;
        border-top: solid $primary-darken-1;
        border-title-style: bold;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    events: reactive[tuple[LogEvent, ...]] = reactive(())

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Events"

    def render(self) -> Text:
        if not self.events:
            return Text("no events yet (limit changes and findings appear here)", style="dim")
        shown = self.events[-max(self.size.height, 1) :]
        out = Text()
        for i, ev in enumerate(shown):
            if i:
                out.append("\n")
            out.append(fmt.local_clock(ev.time), style="dim")
            out.append(" ")
            out.append(ev.text, style=KIND_STYLE.get(ev.kind, ""))
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out
