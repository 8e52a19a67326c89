"""The `:` command line: exact values for the limits (cap 8, queue 64, timeout 20, rpm off)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input


class CommandLine(Input):
    """Hidden until `:`; Enter submits the text, Escape closes it."""

    DEFAULT_CSS = """
    CommandLine {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
        background: $boost;
    }
    CommandLine:focus { border: none; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "close", show=False)]

    class Closed(Message):
        """The user left the command line without running anything."""

    can_focus = False
    """Only while open: a hidden focused Input would swallow the single-letter keys."""

    def open(self) -> None:
        self.value = ""
        self.can_focus = True
        self.display = True
        self.focus()

    def close(self) -> None:
        """Hide and give the keys back to the app."""
        self.display = False
        self.can_focus = False
        self.blur()

    def action_close(self) -> None:
        self.close()
        self.post_message(self.Closed())
