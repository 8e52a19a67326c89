"""Every key and paste, acted on one at a time in the order they arrived.

A burst (a paste, a fast typist) comes in one read, which Textual's queues could reorder, so a
`KeyRouter` decides each on the state the keys before it left (docs/tui.md, "How it works").
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from textual import events
from textual.app import App
from textual.screen import ModalScreen

from llmtop.tui.textual_compat import run_binding
from llmtop.tui.widgets.commandline import CommandLine

MOUNT_WAIT_S = 5.0
"""How long keys wait for the screen a key before them opened to be mounted, so that they act
on that screen as typed, not on one half built."""
HELD_RETRY_S = 0.01
"""How often held keys look again whether their screen is mounted."""


class KeyRouter:
    """Routes the app's keys and pastes in arrival order; the app passes every one to `take`.

    `open_line`, `run_line` and `close_line` are what `:` (or a paste), Enter and Escape do to
    the command line; the router only decides when they happen.
    """

    def __init__(
        self,
        app: App[Any],
        *,
        open_line: Callable[[], None],
        run_line: Callable[[], None],
        close_line: Callable[[], None],
    ) -> None:
        self.app = app
        self._open_line = open_line
        self._run_line = run_line
        self._close_line = close_line
        self._held: deque[events.Key | events.Paste] = deque()
        """Keys and pastes waiting, in order, for the screen on top to be mounted."""
        self._held_since: float | None = None
        self._retry_armed = False

    async def take(self, event: events.Event) -> bool:
        """Act on (or hold) `event` if it is a key or paste from the terminal; False: it is
        not one, the app handles it as usual."""
        if not isinstance(event, (events.Key, events.Paste)) or event.is_forwarded:
            return False
        if isinstance(event, events.Key) and not self.app.app_focus:
            self.app.app_focus = True  # as Textual does on a key
        self._held.append(event)
        await self._handle_held()
        return True

    def _screen_ready(self) -> bool:
        """The screen on top is mounted (or has had MOUNT_WAIT_S): its keys may act on it."""
        app = self.app
        if not app.screen_stack or app.screen.is_mounted:
            self._held_since = None
            return True
        now = time.monotonic()
        if self._held_since is None:
            self._held_since = now
        return now - self._held_since >= MOUNT_WAIT_S

    async def _handle_held(self) -> None:
        """Act on the held keys in order while the screen on top is ready; else look again
        shortly (waiting here would stop the app building that screen)."""
        held = self._held
        while held and self._screen_ready():
            event = held.popleft()
            if isinstance(event, events.Key):
                await self._route_key(event)
            else:
                self._route_paste(event)
        if held and not self._retry_armed:
            self._retry_armed = True
            self.app.set_timer(HELD_RETRY_S, self._retry_held)

    async def _retry_held(self) -> None:
        self._retry_armed = False
        await self._handle_held()

    def _line_holding_keys(self) -> CommandLine | None:
        """The command line when it is open and its screen (the dashboard) is on top."""
        app = self.app
        if not app.screen_stack or app.screen is not app.screen_stack[0]:
            return None
        lines = list(app.screen_stack[0].query(CommandLine))
        return lines[0] if lines and lines[0].is_open else None

    async def _route_key(self, event: events.Key) -> None:
        """One key now: into the open line, else the binding the screen on top has for it
        (priority bindings first, as Textual looks them up)."""
        if not self.app.screen_stack:
            return
        line = self._line_holding_keys()
        key = event.key
        if line is None:
            if not await run_binding(self.app, key, priority=True):
                await run_binding(self.app, key, priority=False)
        elif key == "enter":
            self._run_line()
        elif key == "escape":
            self._close_line()
        elif event.is_printable or not await run_binding(self.app, key, priority=True):
            await line.type_key(event)  # ctrl+c still quits; a key the line has no use for: none

    def _route_paste(self, event: events.Paste) -> None:
        """A paste goes into the open line; with the line closed its first line opens it, to
        be run with Enter (or dropped with Escape), never by the paste itself. On a dialog it
        does nothing: nothing there reads text."""
        app = self.app
        if not app.screen_stack or isinstance(app.screen, ModalScreen):
            return
        line = self._line_holding_keys()
        if line is not None:
            line.paste(event.text)
            return
        first = next((t for t in event.text.splitlines() if t.strip()), "")
        text = first.strip().lstrip(":").strip()
        if text:
            self._open_line()  # read-only, no gateway: it says why and stays closed
            line = self._line_holding_keys()
            if line is not None:
                line.paste(text)
