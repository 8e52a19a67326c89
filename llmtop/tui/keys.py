"""Every key and paste, handled by the app one at a time in the order they arrived.

A burst (a paste, `tmux send-keys ':cap 3' Enter +`, a fast typist) reaches the app in one
read of the terminal. Textual routes a key through more than one queue (priority bindings run
when the key reaches the app, the rest go to the focused widget's queue and come back to the app
to find their binding), so the keys of a burst could act out of order: an Enter ran the command
line before the characters ahead of it were in it. Here each key is decided when it arrives, on
the state the keys before it left: into the open command line (`CommandLine`, whose docstring
tells the story), or the one binding the screen on top has for it, looked up once with
Textual's own lookup (`App._check_bindings`, textual 8.2). Nothing is forwarded to a widget's
queue, so no key can act later on a screen it was not typed on; a key that no binding takes
does nothing (no widget here reads keys itself; the app types into the line). Keys behind one
that opened a screen wait, in order, until that screen is mounted. Mixed into `LlmtopApp`
under the admin keys.
"""

from __future__ import annotations

import time
from collections import deque

from textual import events
from textual.app import App
from textual.screen import ModalScreen

from llmtop.tui.widgets.commandline import CommandLine

MOUNT_WAIT_S = 5.0
"""How long keys wait for the screen a key before them opened (`w`, `?`, Enter on a replica,
the pause question) to be mounted, so that they act on that screen, as typed, not on one half
built."""
HELD_RETRY_S = 0.01
"""How often held keys look again whether their screen is mounted."""


class KeyRouter(App[int]):
    """Routes keys and pastes in arrival order; the admin controls provide the line's actions."""

    def _command_line(self) -> CommandLine:
        return self.screen_stack[0].query_one(CommandLine)

    def action_command(self) -> None:
        """`:` opens the command line (or says why it cannot)."""
        raise NotImplementedError

    def action_command_run(self) -> None:
        """Enter in the line: close it, then run what it held."""
        raise NotImplementedError

    def action_command_close(self) -> None:
        """Escape in the line: close it, discarding what it held."""
        raise NotImplementedError

    _held: deque[events.Key | events.Paste] | None = None
    """Keys and pastes that arrived while a screen was still being built, or behind such a key:
    they wait here, in order, and act on that screen once it is mounted."""
    _held_since: float | None = None
    _retry_armed = False

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded:
            if isinstance(event, events.Key) and not self.app_focus:
                self.app_focus = True  # as Textual does on a key
            if self._held is None:
                self._held = deque()
            self._held.append(event)
            await self._handle_held()
            return
        await super().on_event(event)

    def _screen_ready(self) -> bool:
        """The screen on top is mounted (or has had MOUNT_WAIT_S): its keys may act on it."""
        if not self.screen_stack or self.screen.is_mounted:
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
                await self._route_paste(event)
        if held and not self._retry_armed:
            self._retry_armed = True
            self.set_timer(HELD_RETRY_S, self._retry_held)

    async def _retry_held(self) -> None:
        self._retry_armed = False
        await self._handle_held()

    def _line_holding_keys(self) -> CommandLine | None:
        """The command line when it is open and its screen (the dashboard) is on top."""
        if not self.screen_stack or self.screen is not self.screen_stack[0]:
            return None
        lines = list(self.screen_stack[0].query(CommandLine))
        return lines[0] if lines and lines[0].is_open else None

    async def _route_key(self, event: events.Key) -> None:
        """Act on one key now: into the open line, else the binding the screen on top has for
        it (priority bindings from the app down, then the others from the focused widget up,
        as Textual looks them up, but here and now instead of after a trip through queues)."""
        if not self.screen_stack:
            return
        line = self._line_holding_keys()
        key = event.key
        if line is None:
            if not await self._check_bindings(key, priority=True):
                await self._check_bindings(key)
        elif key == "enter":
            self.action_command_run()
        elif key == "escape":
            self.action_command_close()
        elif event.is_printable or not await self._check_bindings(key, priority=True):
            await line.type_key(event)  # ctrl+c still quits; a key the line has no use for: none

    async def _route_paste(self, event: events.Paste) -> None:
        """A paste goes into the open line; with the line closed its first line opens it, to
        be read and run with Enter (or dropped with Escape), never run by the paste itself. On
        a dialog it does nothing: nothing there reads text."""
        if not self.screen_stack or isinstance(self.screen, ModalScreen):
            return
        line = self._line_holding_keys()
        if line is not None:
            line.paste(event.text)
            return
        first = next((t for t in event.text.splitlines() if t.strip()), "")
        text = first.strip().lstrip(":").strip()
        if text:
            self.action_command()  # read-only, no gateway: it says why and stays closed
            line = self._line_holding_keys()
            if line is not None:
                line.paste(text)
