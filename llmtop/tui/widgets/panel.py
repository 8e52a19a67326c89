"""The base of every numbers panel: a titled box that renders a `View` and fetches nothing.

A new view re-renders the panel only when its text changed, and re-lays-out the screen only
when its number of lines changed (what a refresh costs: docs/tui.md#cost).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from rich.text import Text
from textual.events import Resize
from textual.reactive import var
from textual.widget import Widget

from llmtop.tui.view.present import View

WAITING = Text("waiting for the first poll…", style="dim")


class Panel(Widget):
    """Renders `body(view)`; the app sets `view` once per poll."""

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
    WRAPS: ClassVar[bool] = False
    """True for panels whose lines wrap: any change may change their height."""

    view: var[View | None] = var(None)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = self.TITLE
        self._text: Text = WAITING

    def watch_view(self) -> None:
        self._update()

    def on_resize(self, event: Resize) -> None:
        self._update(force=True)

    def _update(self, force: bool = False) -> None:
        text = WAITING if self.view is None else self.body(self.view)
        if text == self._text and not force:
            return
        lines_changed = text.plain.count("\n") != self._text.plain.count("\n")
        self._text = text
        self.refresh(layout=lines_changed or (self.WRAPS and not force))

    def render(self) -> Text:
        return self._text

    @abstractmethod
    def body(self, view: View) -> Text:
        """The panel's lines for one moment: each panel's own (mypy refuses a Panel without)."""


def shown(widget: Widget) -> bool:
    """Whether `widget` and every container above it are displayed: a panel that is not (the
    single-engine panels under a fleet's replica table) need not compute what it would show."""
    return all(node.display for node in widget.ancestors_with_self if isinstance(node, Widget))


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
