"""The base of every numbers panel: a titled box that renders a `View` and fetches nothing."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from llmtop.tui.present import View


class Panel(Widget):
    """Renders `body(view)`; the app sets `view` once per poll (and on the age tick)."""

    DEFAULT_CSS = """
    Panel {
        height: auto;
        border-top: solid $primary-darken-1;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1;
    }
    """

    TITLE = ""
    view: reactive[View | None] = reactive(None, layout=True)
    """Set by the app; layout=True because a panel's height follows its lines."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = self.TITLE

    def render(self) -> Text:
        if self.view is None:
            return Text("waiting for the first poll…", style="dim")
        return self.body(self.view)

    def body(self, view: View) -> Text:
        """The panel's lines for one moment."""
        raise NotImplementedError


def label(text: str, width: int = 0) -> Text:
    """A dim field label, padded to `width`."""
    return Text(text.ljust(width), style="dim")


def value(text: str, style: str = "bold") -> Text:
    """A field value; n/a is shown dim so unknown never looks like a measurement."""
    return Text(text, style="dim italic" if text == "n/a" else style)


def line(*parts: Text | str) -> Text:
    """Join label/value pieces into one line."""
    out = Text()
    for p in parts:
        out.append_text(p if isinstance(p, Text) else Text(p))
    return out


def bar(frac: float | None, width: int, *, warn: float = 0.8, crit: float = 0.9) -> Text:
    """A horizontal gauge: ▕████░░░░▏, coloured by how full it is."""
    width = max(width, 4)
    if frac is None:
        return Text("░" * width, style="dim")
    f = min(max(frac, 0.0), 1.0)
    filled = round(f * width)
    style = "red" if f >= crit else "yellow" if f >= warn else "green"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")
