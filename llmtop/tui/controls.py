"""The keys that change the gateway: limits, pause/resume, the command line, recording.

Each change runs on its own worker, one at a time, against the admin API; success and every
failure (down, timeout, 401, 400, 5xx) are shown as a notification and written to the event
log. `--read-only` turns each of these keys into a notice. Mixed into `LlmtopApp`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from textual.widgets import Footer

from llmtop.core.base.snapshot import GatewayStats, Snapshot
from llmtop.errors import LlmtopError
from llmtop.settings import MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.keys import KeyRouter
from llmtop.tui.screens.confirm import ConfirmScreen
from llmtop.tui.view import commands
from llmtop.tui.view.present import LogEvent, limit_text
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


class AdminControls(KeyRouter):
    """Key actions that change the gateway; the app provides the state and the rendering."""

    admin: AdminClient | None
    monitor: MonitorSettings
    recorder: Recorder | None
    snapshot: Snapshot | None
    _admin_lock: asyncio.Lock

    def _render_all(self, *, charts: bool) -> None:
        raise NotImplementedError

    def log_events(self, *events: LogEvent) -> None:
        raise NotImplementedError

    def _can_change(self, what: str) -> bool:
        if self.monitor.read_only:
            self.notify(f"read-only: {what} is disabled", severity="warning", timeout=3)
            return False
        if self.admin is None:
            self.notify(f"{what}: no gateway configured (--gateway URL)", severity="error")
            return False
        return True

    def _failed(self, what: str, error: str) -> None:
        self.notify(error, title=f"{what} failed", severity="error", timeout=8)
        self.log_events(LogEvent(time.time(), "error", f"{what} failed: {error}"))

    def _run_change(self, what: str, change: Callable[[AdminClient], Awaitable[str]]) -> None:
        """Run one admin call on its own worker, one at a time; show success and failure."""
        admin = self.admin
        if admin is None:
            return

        async def job() -> None:
            async with self._admin_lock:
                try:
                    done = await change(admin)
                except LlmtopError as e:
                    self._failed(what, one_line(e))
                    return
                except Exception as e:  # an unexpected bug still reaches the screen
                    self._failed(what, one_line(e))
                    return
            self.notify(done, title="gateway", timeout=3)
            self.log_events(LogEvent(time.time(), "change", done))

        start_worker(self, job, group="admin", exit_on_error=False)

    def _set_limits(self, what: str, step: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        async def change(admin: AdminClient) -> str:
            current = dict(await admin.get_limits())
            changes = step(current)
            new = await admin.set_limits(**changes)
            self._show_limits(new)
            return "set " + ", ".join(
                f"{commands.label_of(k)} {limit_text(k, current.get(k))} -> "
                f"{limit_text(k, new.get(k, v))}"
                for k, v in changes.items()
            )

        self._run_change(what, change)

    _set_here: tuple[float, dict[str, Any]] | None = None
    """(wall time, fields): the gateway's state as the last change made here left it."""

    def _show_limits(self, limits: dict[str, Any]) -> None:
        """Show new limits now, not at the next poll (which then sees no change to log)."""
        snap = self.snapshot
        if snap is None or snap.gateway is None:
            return
        fields = {k: v for k, v in limits.items() if k in GatewayStats.__dataclass_fields__}
        before = self._set_here[1] if self._set_here is not None else {}
        self._set_here = (time.time(), {**before, **fields})
        self.snapshot = replace(snap, gateway=replace(snap.gateway, **fields))
        self._render_all(charts=False)

    def _after_changes_here(self, snap: Snapshot) -> Snapshot:
        """A poll that began before a change made here was answered read the gateway before
        it: it shows the state that change left, not the one before (the log would say the
        limit went back, then forward again at the next poll)."""
        if self._set_here is None or snap.gateway is None:
            return snap
        at, fields = self._set_here
        if snap.time >= at:
            self._set_here = None
            return snap
        return replace(snap, gateway=replace(snap.gateway, **fields))

    def action_cap(self, delta: int) -> None:
        what = f"cap {delta:+d}"
        if self._can_change(what):
            self._set_limits(
                what,
                lambda cur: {
                    "max_concurrency": commands.step_concurrency(cur.get("max_concurrency"), delta)
                },
            )

    def action_autopilot(self) -> None:
        """`a`: hand the KV budget to the autopilot, or take it back (mode auto <-> manual)."""
        if self._can_change("autopilot"):
            self._set_limits(
                "autopilot",
                lambda cur: {"mode": "manual" if cur.get("mode") == "auto" else "auto"},
            )

    def action_apply_suggestion(self) -> None:
        """`A`: set the limits the autopilot suggests (mode advise; docs/autopilot.md)."""
        if self._can_change("apply suggestion"):
            self._run_change("apply suggestion", lambda admin: admin.apply_suggestion())

    def action_queue(self, direction: int) -> None:
        what = f"queue {direction * commands.QUEUE_STEP:+d}"
        if self._can_change(what):
            self._set_limits(
                what,
                lambda cur: {"max_queue": commands.step_queue(cur.get("max_queue"), direction)},
            )

    def action_command(self) -> None:
        """`:` opens the command line; the keys typed behind it go into it (`tui.keys`)."""
        if not self._can_change("the command line"):
            return
        dashboard = self.screen_stack[0]
        while self.screen is not dashboard:  # a replica's view: the line is on the dashboard
            self.pop_screen()
        dashboard.query_one(Footer).display = False  # its keys are text while typing
        self._command_line().open()

    def action_command_run(self) -> None:
        """Enter in the command line: close it, then run what it held."""
        line = self._command_line()
        text = line.value.strip()
        self.action_command_close()
        if text:
            self.run_command(text)

    def action_command_close(self) -> None:
        """Escape in the command line (and after Enter): the keys are the dashboard's again."""
        self._command_line().close()
        self.screen_stack[0].query_one(Footer).display = True
        self.command_closed()

    def command_closed(self) -> None:
        """Hook: the command line closed (the what-if preview goes with it)."""

    def run_command(self, text: str) -> None:
        """One `:` command: a limit change or pause/resume; a bad one is said, not run."""
        try:
            parsed = commands.parse_command(text)
        except LlmtopError as e:
            self._failed(f":{text}", one_line(e))
            return
        if parsed == "pause":
            self._pause_or_resume(pause=True)
        elif parsed == "resume":
            self._pause_or_resume(pause=False)
        elif isinstance(parsed, dict):
            changes = parsed
            self._set_limits(f":{text}", lambda _cur: changes)

    _asking_pause = False
    """`p` asked and the answer is not in: another `p` typed before the question showed asks
    nothing more (two questions would stack)."""

    def action_pause(self) -> None:
        """`p`: ask the gateway whether it is paused, then ask the user. A `y` typed before the
        question shows is dropped on purpose: a confirmation must follow the question."""
        if not self._can_change("pause/resume") or self.admin is None or self._asking_pause:
            return
        admin = self.admin
        self._asking_pause = True

        async def ask() -> None:
            asked = False
            try:
                try:  # the gateway's own state, not a poll that may be a second old
                    paused = bool((await admin.get_stats()).get("paused"))
                except LlmtopError as e:
                    self._failed("pause/resume", one_line(e))
                    return
                self._confirm_pause(paused)
                asked = True
            finally:
                if not asked:
                    self._asking_pause = False

        start_worker(self, ask, group="admin", exit_on_error=False)

    def _confirm_pause(self, paused: bool) -> None:
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

        self.push_screen(ConfirmScreen(question, detail), answered)

    def _pause_or_resume(self, *, pause: bool) -> None:
        async def change(admin: AdminClient) -> str:
            state = await (admin.pause() if pause else admin.resume())
            self._show_limits({"paused": state})
            return "admission PAUSED" if state else "admission resumed"

        self._run_change("pause" if pause else "resume", change)

    def action_record(self) -> None:
        if self.recorder is None:
            self.notify("recording not available (start with --record FILE)", severity="warning")
            return
        try:
            on = self.recorder.toggle()
        except LlmtopError as e:
            self._failed("recording", one_line(e))
            return
        self.query_one(StatusHeader).recording = on
        self.notify("recording" if on else "recording stopped", timeout=3)
