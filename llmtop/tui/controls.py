"""What the keys change: the gateway's limits, pause/resume, the `:` command line, recording.

Each change runs on its own worker, one at a time, against the admin API; its success or failure
is a notification and an event-log line. `--read-only` turns each of these keys into a notice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from textual.app import App
from textual.widgets import Footer

from llmtop.core.base.snapshot import GatewayStats, Snapshot
from llmtop.errors import LlmtopError
from llmtop.sources.gateway import AdminClient
from llmtop.tui.screens.confirm import ConfirmScreen
from llmtop.tui.view import commands
from llmtop.tui.view.present import LogEvent, limit_text
from llmtop.tui.widgets.commandline import CommandLine
from llmtop.tui.widgets.header import StatusHeader
from llmtop.tui.work import start_worker


class Recorder(Protocol):
    """What `r` toggles; `llmtop --record` passes one."""

    def toggle(self) -> bool:
        """Start or stop recording; returns whether it is recording now."""
        ...


def one_line(e: BaseException) -> str:
    """An exception as one short line for the screen (an LlmtopError's message as is)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, LlmtopError):
        return text or type(e).__name__
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class AdminControls:
    """The gateway's keys and the command line, owned by the app.

    `app` shows notifications, runs workers and the pause question; `log` writes the event log;
    `changed` is called after a change made here (`with_changes_here`), `line_closed` on closing.
    """

    def __init__(
        self,
        app: App[Any],
        admin: AdminClient | None,
        *,
        read_only: bool,
        recorder: Recorder | None,
        log: Callable[[LogEvent], None],
        changed: Callable[[], None],
        line_closed: Callable[[], None],
    ) -> None:
        self.app = app
        self.admin = admin
        self.read_only = read_only
        self.recorder = recorder
        self._log = log
        self._changed = changed
        self._line_closed = line_closed
        self._lock = asyncio.Lock()
        self._set_here: tuple[float, dict[str, Any]] | None = None
        """(wall time, fields): the gateway's state as the last change made here left it."""
        self._asking_pause = False
        """`p` asked and the answer is not in: another `p` asks nothing more (two questions
        would stack)."""

    def can_change(self, what: str) -> bool:
        """Whether a change may be sent; if not, the notice says why."""
        if self.read_only:
            self.app.notify(f"read-only: {what} is disabled", severity="warning", timeout=3)
            return False
        if self.admin is None:
            self.app.notify(f"{what}: no gateway configured (--gateway URL)", severity="error")
            return False
        return True

    def failed(self, what: str, error: str) -> None:
        """A failure, as a notification and in the event log."""
        self.app.notify(error, title=f"{what} failed", severity="error", timeout=8)
        self._log(LogEvent(time.time(), "error", f"{what} failed: {error}"))

    def _run_change(self, what: str, change: Callable[[AdminClient], Awaitable[str]]) -> None:
        """Run one admin call on its own worker, one at a time; show success and failure."""
        admin = self.admin
        if admin is None:
            return

        async def job() -> None:
            async with self._lock:
                try:
                    done = await change(admin)
                except Exception as e:  # LlmtopError, or an unexpected bug: both are shown
                    self.failed(what, one_line(e))
                    return
            self.app.notify(done, title="gateway", timeout=3)
            self._log(LogEvent(time.time(), "change", done))

        start_worker(self.app, job, group="admin", exit_on_error=False)

    def _set_limits(self, what: str, step: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        async def change(admin: AdminClient) -> str:
            current = dict(await admin.get_limits())
            changes = step(current)
            new = await admin.set_limits(**changes)
            self._made_here(new)
            return "set " + ", ".join(
                f"{commands.label_of(k)} {limit_text(k, current.get(k))} -> "
                f"{limit_text(k, new.get(k, v))}"
                for k, v in changes.items()
            )

        self._run_change(what, change)

    def _made_here(self, limits: dict[str, Any]) -> None:
        """Remember what a change made here left, and have the app show it now, not at the
        next poll (which would then see no change to log)."""
        fields = {k: v for k, v in limits.items() if k in GatewayStats.__dataclass_fields__}
        before = self._set_here[1] if self._set_here is not None else {}
        self._set_here = (time.time(), {**before, **fields})
        self._changed()

    def with_changes_here(self, snap: Snapshot) -> Snapshot:
        """`snap` with the state the last change made here left, if it was read before that
        change was answered (else the log would say the limit went back, then forward)."""
        if self._set_here is None or snap.gateway is None:
            return snap
        at, fields = self._set_here
        if snap.time >= at:
            self._set_here = None
            return snap
        return replace(snap, gateway=replace(snap.gateway, **fields))

    def cap(self, delta: int) -> None:
        """`+` / `-`: the cap one step up or down (`commands.step_concurrency`)."""
        what = f"cap {delta:+d}"
        if self.can_change(what):
            self._set_limits(
                what,
                lambda cur: {
                    "max_concurrency": commands.step_concurrency(cur.get("max_concurrency"), delta)
                },
            )

    def autopilot(self) -> None:
        """`a`: hand the KV budget to the autopilot, or take it back (mode auto <-> manual)."""
        if self.can_change("autopilot"):
            self._set_limits(
                "autopilot",
                lambda cur: {"mode": "manual" if cur.get("mode") == "auto" else "auto"},
            )

    def apply_suggestion(self) -> None:
        """`A`: set the limits the autopilot suggests (mode advise; docs/autopilot.md)."""
        if self.can_change("apply suggestion"):
            self._run_change("apply suggestion", lambda admin: admin.apply_suggestion())

    def queue(self, direction: int) -> None:
        """`]` / `[`: the queue one step up or down."""
        what = f"queue {direction * commands.QUEUE_STEP:+d}"
        if self.can_change(what):
            self._set_limits(
                what,
                lambda cur: {"max_queue": commands.step_queue(cur.get("max_queue"), direction)},
            )

    def _dashboard_parts(self) -> tuple[CommandLine, Footer]:
        dashboard = self.app.screen_stack[0]
        return dashboard.query_one(CommandLine), dashboard.query_one(Footer)

    def open_line(self) -> None:
        """`:` opens the command line, on the dashboard (a replica's screen closes first)."""
        if not self.can_change("the command line"):
            return
        app = self.app
        while app.screen is not app.screen_stack[0]:
            app.pop_screen()
        line, footer = self._dashboard_parts()
        footer.display = False  # its keys are text while typing
        line.open()

    def run_line(self) -> None:
        """Enter in the line: close it, then run what it held."""
        text = self._dashboard_parts()[0].value.strip()
        self.close_line()
        if text:
            self.run_command(text)

    def close_line(self) -> None:
        """Escape in the line (and after Enter): the keys are the dashboard's again."""
        line, footer = self._dashboard_parts()
        line.close()
        footer.display = True
        self._line_closed()

    def run_command(self, text: str) -> None:
        """One `:` command: a limit change or pause/resume; a bad one is said, not run."""
        try:
            parsed = commands.parse_command(text)
        except LlmtopError as e:
            self.failed(f":{text}", one_line(e))
            return
        if parsed == "pause":
            self._pause_or_resume(pause=True)
        elif parsed == "resume":
            self._pause_or_resume(pause=False)
        elif isinstance(parsed, dict):
            changes = parsed
            self._set_limits(f":{text}", lambda _cur: changes)

    def pause(self) -> None:
        """`p`: ask the gateway whether it is paused, then ask the user. A `y` typed before the
        question shows is dropped on purpose: a confirmation must follow the question."""
        if not self.can_change("pause/resume") or self.admin is None or self._asking_pause:
            return
        admin = self.admin
        self._asking_pause = True

        async def ask() -> None:
            asked = False
            try:
                try:  # the gateway's own state, not a poll that may be a second old
                    paused = bool((await admin.get_stats()).get("paused"))
                except LlmtopError as e:
                    self.failed("pause/resume", one_line(e))
                    return
                self.ask_pause(paused=paused)
                asked = True
            finally:
                if not asked:
                    self._asking_pause = False

        start_worker(self.app, ask, group="admin", exit_on_error=False)

    def ask_pause(self, *, paused: bool) -> None:
        """The question: resume if `paused`, else pause; yes sends it."""
        if paused:
            question, detail = "Resume admission?", "Queued requests start flowing to the engine."
        else:
            question = "Pause admission?"
            detail = (
                "New requests wait in the gateway queue (429 after the queue timeout);"
                " requests in flight finish."
            )

        def answered(yes: bool | None) -> None:
            self._asking_pause = False
            if yes:
                self._pause_or_resume(pause=not paused)

        self.app.push_screen(ConfirmScreen(question, detail), answered)

    def _pause_or_resume(self, *, pause: bool) -> None:
        async def change(admin: AdminClient) -> str:
            state = await (admin.pause() if pause else admin.resume())
            self._made_here({"paused": state})
            return "admission PAUSED" if state else "admission resumed"

        self._run_change("pause" if pause else "resume", change)

    def record(self) -> None:
        """`r`: start or stop the recorder (REC in the header)."""
        if self.recorder is None:
            self.app.notify(
                "recording not available (start with --record FILE)", severity="warning"
            )
            return
        try:
            on = self.recorder.toggle()
        except LlmtopError as e:
            self.failed("recording", one_line(e))
            return
        self.app.query_one(StatusHeader).recording = on
        self.app.notify("recording" if on else "recording stopped", timeout=3)
