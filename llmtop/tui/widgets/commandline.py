"""The `:` command line: exact values for the limits (cap 8, queue 64, timeout 20, rpm off)."""

from __future__ import annotations

from textual import events
from textual.widgets import Input

from llmtop.tui.textual_compat import own_bindings


class CommandLine(Input):
    """Hidden until `:`; while it is open (`is_open`) the key router types every key into it
    (`type_key`, `paste`), whatever has the focus, so no queue of its own can reorder a burst
    (`llmtop.tui.keys`). It takes the focus only to show its cursor.
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

    can_focus = False
    """Only while open: a hidden line takes no focus (Tab, a click) and shows no cursor."""

    def __init__(self, *, placeholder: str = "", id: str | None = None) -> None:
        # Not select-on-focus: the focus arrives through the Input's own queue, when the
        # first keys may already be in the line; selecting them would let the next replace them.
        super().__init__(placeholder=placeholder, id=id, select_on_focus=False)

    @property
    def is_open(self) -> bool:
        """Open and holding the keys."""
        return bool(self.display)

    def open(self, text: str = "") -> None:
        """Show the line holding `text` (the cursor after it); the next key is typed into it."""
        self.value = text
        self.cursor_position = len(text)
        self.can_focus = True
        self.display = True
        self.screen.set_focus(self)

    def close(self) -> None:
        """Hide; the next key is the dashboard's again."""
        self.display = False
        self.can_focus = False
        if self.screen.focused is self:
            self.screen.set_focus(None)

    async def type_key(self, event: events.Key) -> bool:
        """One key typed into the line now: a character at the cursor, else one of the Input's
        own editing keys (arrows, Backspace, Home, End, ctrl+w, ...). False: not a key of the
        line (the app decides what it is)."""
        if event.is_printable:
            assert event.character is not None
            self.paste(event.character)
            return True
        for binding in own_bindings(self, event.key):
            if binding.action != "submit" and await self.app.run_action(binding.action, self):
                return True
        return False

    def paste(self, text: str) -> None:
        """Insert `text` at the cursor (over a selection), only its first line: a pasted
        newline does not run the command, Enter does."""
        lines = text.splitlines()
        if not lines:
            return
        selection = self.selection
        if selection.is_empty:
            self.insert_text_at_cursor(lines[0])
        else:
            self.replace(lines[0], *selection)
