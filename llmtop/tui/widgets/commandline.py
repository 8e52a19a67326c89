"""The `:` command line: exact values for the limits (cap 8, queue 64, timeout 20, rpm off)."""

from __future__ import annotations

from textual import events
from textual.widgets import Input

from llmtop.tui.textual_compat import own_bindings


class CommandLine(Input):
    """Hidden until `:`; the app types every key into it while it is open (`llmtop.tui.keys`).

    Keys often come faster than the app handles them: a paste, `tmux send-keys ':cap 3' Enter`
    and a fast typist all deliver a burst in one read of the terminal. Textual would route each
    key through two queues: the app checks its priority bindings when the key arrives and posts
    the rest to the focused widget, which handles it later. An Enter bound with priority then
    ran the command before the characters queued ahead of it had reached this Input (`:cap 3`
    + Enter in one write ran an empty line: the cap stayed, nothing was said), and a key that
    closed a screen raced the keys behind it. So no key takes that route any more: the app
    handles every key and paste itself, one at a time in arrival order, and decides for each,
    from the state the keys before it left, whether it goes into this line (text at the cursor
    or one of the Input's editing keys, at once, through `type_key` and `paste`), runs or closes
    it (Enter, Escape), or is a key of the dashboard. Nothing is forwarded to this widget, so no
    second queue can reorder a burst. The line holds the keys while it is shown (`is_open`),
    whatever has the focus; it takes the focus only to show its cursor.
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
        # Not select-on-focus: the focus arrives through the Input's own queue, after the
        # first keys may already be in the line, and selecting them then would let the next
        # key replace them (`:cap 3` ran as `:ap 3`).
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
