"""The replay timeline: play state, speed, the recorded time, and a bar of where the playhead is."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from llmtop.core.base import format as fmt
from llmtop.recording.replay import Playhead


def _span(s: float) -> str:
    m, sec = divmod(round(max(s, 0.0)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


class Timeline(Widget):
    """One line: PLAY/PAUSED, speed, the poll's local time, offset / length, a bar, poll n/N."""

    DEFAULT_CSS = """
    Timeline {
        dock: top;
        height: 1;
        background: $boost;
        padding: 0 1;
    }
    """

    playhead: reactive[Playhead | None] = reactive(None)

    def render(self) -> Text:
        p = self.playhead
        if p is None:
            return Text("replay: loading…", style="dim")
        state = (
            (" PAUSED ", "bold black on yellow") if p.paused else (" PLAY ", "bold black on green")
        )
        left = Text.assemble(
            state,
            (f" x{p.speed:g}", "bold"),
            f"  {fmt.local_clock(p.time)} UTC",
            (f"  +{_span(p.time - p.start)} / {_span(p.end - p.start)}", "dim"),
            "  ",
        )
        right = f"  {p.index + 1}/{p.polls}"
        if p.computed < p.polls:
            right += f" (computing {p.computed * 100 // p.polls}%)"
        width = max(self.size.width, 1) - left.cell_len - len(right)
        if width >= 8:
            frac = 0.0 if p.end <= p.start else (p.time - p.start) / (p.end - p.start)
            at = min(int(frac * (width - 1) + 0.5), width - 1)
            left.append("━" * at, style="cyan")
            left.append("●", style="bold cyan")
            left.append("─" * (width - 1 - at), style="dim")
        left.append(right, style="dim")
        left.truncate(max(self.size.width, 1), overflow="ellipsis")
        return left
