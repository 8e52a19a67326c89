"""TUI test helpers: a pinned clock and time zone, apps on the replayed demo story, a target that
never answers, waiting on admin workers, keys typed faster than the app handles them, a what-if
feed from a known sim profile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from textual import events
from textual.app import App
from textual.pilot import Pilot

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.view.source import SnapshotSource
from llmtop.whatif.feed import WhatIfFeed
from llmtop.whatif.model.window import Point
from tests.support.whatif_truth import scrape_run
from tests.tui import story
from tests.whatif_truths import H100


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
    moment: str = "kv-exhausted",
    admin: AdminClient | None = None,
    read_only: bool = False,
    interval_s: float = 1.0,
    history: Sequence[Snapshot] | None = None,
    **kw: Any,
) -> LlmtopApp:
    """The screen at one of the story's moments (tests/tui/story.py), a frozen age clock."""
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


Maker = Callable[..., LlmtopApp]


CHARACTERS = {"colon": ":", "space": " ", "plus": "+", "question_mark": "?", "enter": "\r"}
"""The characters of the named keys `burst` types (a letter or a digit is its own name)."""


def burst(app: LlmtopApp, *keys: str) -> None:
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


@pytest.fixture(scope="module")
def points() -> list[Point]:
    """What the what-if feed would have scraped: a known sim profile, in virtual time."""
    return scrape_run(H100, 30.0)


def feed_of(points: list[Point]) -> WhatIfFeed:
    return WhatIfFeed("http://127.0.0.1:9", None, None, HealthSettings(), points=points, live=False)
