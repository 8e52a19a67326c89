"""The `:` command line: exact values for the limits (cap 8, queue 64, timeout 20, rpm off)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input


class CommandLine(Input):
    """Hidden until `:`; Enter runs the text, Escape closes it (both the app's actions).

    Keys often come faster than the app handles them (a paste, `tmux send-keys`, a fast
    typist): opening and closing move the focus at once, not on a later `call_later` as
    `Widget.focus` does, so that the keys queued behind `:` are routed to the line and the keys
    queued behind Enter or Escape to the dashboard. Enter and Escape are priority bindings for
    the same reason: they run when the key arrives, before the keys after it are routed.
    """

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

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "app.command_run", "run", show=False, priority=True),
        Binding("escape", "app.command_close", "close", show=False, priority=True),
    ]

    can_focus = False
    """Only while open: a hidden focused Input would swallow the single-letter keys."""

    @property
    def is_open(self) -> bool:
        """Open and holding the keys."""
        return self.display and self.screen.focused is self

    def open(self) -> None:
        """Show an empty line and route the keys to it from the next key on."""
        self.value = ""
        self.can_focus = True
        self.display = True
        self.screen.set_focus(self)

    def close(self) -> None:
        """Hide and give the keys back to the app from the next key on."""
        self.display = False
        self.can_focus = False
        if self.screen.focused is self:
            self.screen.set_focus(None)
