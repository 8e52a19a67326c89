"""TUI test helpers: apps on the replayed demo story (`make_app`), a target that never answers,
a poll that failed, waiting on admin workers (`settle`) or on a condition (`until`), keys typed
faster than the app handles them (`burst`), the notifications and event log on screen, the
gateway's limits read back, and a what-if feed from scraped points."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from textual import events
from textual.app import App
from textual.pilot import Pilot

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.view.source import SnapshotSource
from llmtop.tui.widgets.panel import Panel
from llmtop.whatif.feed import WhatIfFeed
from llmtop.whatif.model.window import Point
from tests.support import story

SIZE = (80, 24)
NOWHERE = "http://127.0.0.1:9"
CHARACTERS = {"colon": ":", "space": " ", "plus": "+", "question_mark": "?", "enter": "\r"}
"""The characters of the named keys `burst` types (a letter or a digit is its own name)."""
Maker = Callable[..., LlmtopApp]


async def limits_of(gw: ServerThread) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        r = await client.get(f"{gw.url}/admin/limits")
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data


async def paused_of(gw: ServerThread) -> bool:
    async with httpx.AsyncClient() as client:
        r = await client.get(f"{gw.url}/admin/stats")
        r.raise_for_status()
        return bool(r.json()["paused"])


class OneSnapshot:
    """The story's KV-exhaustion poll with the engine's fields replaced."""

    def __init__(self, **engine: Any) -> None:
        snap = story.snapshots()[story.index_at(story.MOMENTS["kv-exhausted"])]
        e = dataclasses.replace(snap.engines[0], **engine)
        self.snapshot = dataclasses.replace(snap, engines=(e, *snap.engines[1:]))

    async def poll(self) -> Snapshot:
        return self.snapshot

    async def aclose(self) -> None:
        return None


def make_app(
    source: SnapshotSource | None = None,
    *,
    moment: str = "kv-exhausted",
    admin: AdminClient | None = None,
    read_only: bool = False,
    interval_s: float = 1.0,
    history: Sequence[Snapshot] | None = None,
    **kw: Any,
) -> LlmtopApp:
    """The screen at one of the story's moments (tests/support/story.py), a frozen age clock."""
    return story.app_at(
        story.MOMENTS[moment],
        source=source,
        history=history,
        admin=admin,
        read_only=read_only,
        interval_s=interval_s,
        **kw,
    )


class SilentSource:
    """A target that never answers: each poll waits until the app shuts down."""

    def __init__(self) -> None:
        self.started = 0
        """Polls the app began (and is still waiting on)."""
        self.closed = False

    async def poll(self) -> Snapshot:
        self.started += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.closed = True


def down_snapshot(
    url: str = "http://127.0.0.1:8000", error: str = "connection refused"
) -> Snapshot:
    """A poll whose scrape of `url` failed, through the pipeline and its rules."""
    raw = RawPoll(time=story.start(), engines=(RawEngine(url, None, error=error),))
    return Pipeline(HealthSettings()).update(raw)


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


def notes(app: App[Any]) -> list[str]:
    """The texts of the notifications on screen (Textual has no public name for them;
    tests/tui/test_textual_compat.py checks this one)."""
    return [n.message for n in app._notifications]


def log_texts(app: LlmtopApp) -> list[str]:
    return [e.text for e in app.events]


def burst(app: App[Any], *keys: str) -> None:
    """Type `keys` with no pause between them, as a paste or `tmux send-keys` delivers them:
    every key is queued before the app handles the first (Pilot.press waits after each), as the
    terminal's input reader posts the keys of one read. What they do may take a round trip to
    the gateway: wait on it (`until`), not on one pause."""
    for key in keys:
        char = key if len(key) == 1 else CHARACTERS.get(key)
        app.post_message(events.Key(key, char))


async def until(pilot: Pilot[Any], done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether `done()` came true within `timeout_s`, checked after each pause."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        await pilot.pause(0.01)
    return True


def feed_of(points: list[Point]) -> WhatIfFeed:
    return WhatIfFeed("http://127.0.0.1:9", None, None, HealthSettings(), points=points, live=False)


def panel(app: App[Any], selector: str) -> Panel:
    """The numbers panel `selector` names (Panel is abstract: mypy refuses it to query_one)."""
    widget = app.query_one(selector)
    assert isinstance(widget, Panel), widget
    return widget


def panel_text(app: App[Any], selector: str) -> str:
    """What the numbers panel `selector` names shows."""
    return panel(app, selector).render().plain


def panels(app: App[Any]) -> list[Panel]:
    """Every numbers panel of the app's screen."""
    return [w for w in app.query("Panel") if isinstance(w, Panel)]
