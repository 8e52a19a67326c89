"""TUI test helpers: a pinned clock and time zone, scripted apps, waiting on admin workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.core.snapshot import Snapshot
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.scripted import GATEWAY_URL, upto
from llmtop.tui.source import ScriptedSource, SnapshotSource


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Event-log times are local wall-clock times: pin the zone so renders are deterministic."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def make_app(
    source: SnapshotSource | None = None,
    *,
    phase: str = "kv-exhausted",
    admin: AdminClient | None = None,
    read_only: bool = False,
    interval_s: float = 1.0,
    history: Sequence[Snapshot] | None = None,
    **kw: Any,
) -> LlmtopApp:
    """An app on scripted data (the story up to `phase`) with a frozen age clock."""
    story = upto(phase)
    return LlmtopApp(
        source or ScriptedSource([story[-1]]),
        monitor=MonitorSettings(
            gateway_url=admin.base_url if admin else GATEWAY_URL,
            interval_s=interval_s,
            read_only=read_only,
        ),
        health=HealthSettings(),
        admin=admin,
        clock=kw.pop("clock", lambda: 0.0),
        history=story if history is None else history,
        **kw,
    )


async def settle(app: LlmtopApp, pilot: Pilot[Any], timeout_s: float = 10.0) -> None:
    """Wait until every admin change has finished (waiting on workers, not sleeping blind)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await pilot.pause()
        if not any(w.group == "admin" and not w.is_finished for w in app.workers):
            await pilot.pause()
            return
        await asyncio.sleep(0.02)
    raise AssertionError("admin change did not finish")


def notes(app: LlmtopApp) -> list[str]:
    """The texts of the notifications on screen."""
    return [n.message for n in app._notifications]


def log_texts(app: LlmtopApp) -> list[str]:
    return [e.text for e in app.events]


Maker = Callable[..., LlmtopApp]
