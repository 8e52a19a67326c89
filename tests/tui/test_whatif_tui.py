"""The what-if in the TUI: `:cap N` previews the prediction before Enter, `w` opens the table.

The feed is filled from a known sim profile scraped in virtual time (harness/whatif_truth.py),
so no engine is needed; the prediction still runs on a worker thread as it does live.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.screens.whatif import WhatIfScreen
from llmtop.tui.whatif_controls import WhatIfPreview
from llmtop.whatif.model.window import Point
from tests.support.tui import feed_of, make_app

SIZE = (120, 30)


async def wait_text(pilot: Pilot[Any], read: Any, want: str, timeout_s: float = 60.0) -> str:
    """The text once `want` is in it, or as it stands at the deadline (a prediction is seconds
    of CPU on a thread of its own)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = str(read())
        if want in text or time.monotonic() > deadline:
            return text
        await pilot.pause(0.1)


async def test_typing_cap_n_previews_the_prediction_before_enter(points: list[Point]) -> None:
    app: LlmtopApp = make_app(admin=AdminClient("http://127.0.0.1:9"), whatif=feed_of(points))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("colon", *"cap 2")
        preview = app.query_one(WhatIfPreview)
        text = await wait_text(pilot, lambda: preview.render(), "PREDICTED cap 2")
        assert preview.display
        assert "PREDICTED cap 2, next 60 s: client TTFT p95" in text
        assert "fit error" in text
        assert "measured now" in text
        await pilot.press("escape")
        assert not preview.display


async def test_the_preview_follows_the_window_filling_without_another_key(
    points: list[Point],
) -> None:
    """Typed before the window is full, `:cap 2` says how far the collection is, and turns
    into the prediction once it is, with no key pressed in between."""
    feed = feed_of([])
    app: LlmtopApp = make_app(admin=AdminClient("http://127.0.0.1:9"), whatif=feed)
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("colon", *"cap 2")
        preview = app.query_one(WhatIfPreview)
        first = await wait_text(pilot, lambda: preview.render(), "collecting metrics")
        assert "collecting metrics (0 s of 30)" in first
        feed.points.extend(points)  # what the feed's scrapes would have added meanwhile
        text = await wait_text(pilot, lambda: preview.render(), "PREDICTED cap 2")
        assert "PREDICTED cap 2, next 60 s" in text
        await pilot.press("escape")
        assert not preview.display
        assert not [w for w in app.workers if w.group == "whatif-preview" and w.is_running]


@pytest.mark.slow(30)
async def test_w_opens_the_table_and_replays_say_they_cannot(points: list[Point]) -> None:
    app: LlmtopApp = make_app(whatif=feed_of(points))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("w")
        screen = app.screen
        assert isinstance(screen, WhatIfScreen)
        text = await wait_text(pilot, lambda: screen.text, "PREDICTED")
        assert "fit error" in text
        assert "current (cap 8" in text
        assert "TTFT p95 at rate -/+1 se" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, WhatIfScreen)
    bare: LlmtopApp = make_app()
    async with bare.run_test(size=SIZE) as pilot:
        await bare.first_snapshot.wait()
        await pilot.press("w")
        assert not isinstance(bare.screen, WhatIfScreen)
