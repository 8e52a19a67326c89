"""The top line: status badge, model, target, engine version and the age of the data."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from llmtop.core.base import format as fmt
from llmtop.tui.view.present import View, badge, engine_badges, engine_label, header_target

BADGE_STYLE = {
    "OK": "bold black on green",
    "DEGRADED": "bold black on yellow",
    "CRITICAL": "bold white on red",
    "DOWN": "bold white on red",
    "UNKNOWN": "bold black on white",
}


class StatusHeader(Widget):
    """One line an on-call engineer reads first: is it healthy, what am I looking at, how fresh."""

    DEFAULT_CSS = """
    StatusHeader {
        height: 1;
        background: $panel;
    }
    """

    view: reactive[View | None] = reactive(None)
    recording: reactive[bool] = reactive(False)
    past: reactive[str] = reactive("")
    """Where the console's past comes from (`view.past.past_label`); "" without one."""

    def render(self) -> Text:
        view = self.view
        if view is None:
            return Text.assemble((" WAIT ", "bold reverse"), " llmtop: waiting for the first poll…")
        snap = view.snapshot
        b = badge(snap, stale=view.stale)
        out = Text.assemble((f" {b} ", BADGE_STYLE[b]), " ")
        eng = view.engine
        for text, style in engine_badges(eng, snap.time):  # first: they change what b means
            out.append(f"{text}", style=style)
            out.append(" ")
        model = eng.model if eng is not None and eng.model else "model n/a"
        out.append(model, style="bold")
        out.append(f"  {header_target(snap)}")
        label = engine_label(eng)
        if label:
            out.append(f"  {label}", style="dim")
        if view.stale:
            out.append(f"  STALE {fmt.age(view.age_s)}", style="bold reverse yellow")
        else:
            out.append(f"  age {fmt.age(view.age_s)}", style="dim")
        if snap.gateway is not None and snap.gateway.paused:
            out.append("  PAUSED", style="bold reverse red")
        if view.read_only:
            out.append("  read-only", style="bold")
        if self.recording:
            out.append("  ● REC", style="bold red")
        if self.past:
            out.append(f"  {self.past}", style="dim")
        out.truncate(max(self.size.width, 1), overflow="ellipsis")
        return out
