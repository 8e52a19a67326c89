"""TUI test helpers: a pinned clock and time zone, apps on the replayed demo story, a target that
never answers, waiting on admin workers, keys typed faster than the app handles them, a what-if
feed from a known sim profile."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from harness.whatif_truth import scrape_run
from llmtop.whatif.model.window import Point
from tests.support.whatif_truths import H100


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Event-log times are local wall-clock times: pin the zone so renders are deterministic."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(scope="module")
def points() -> list[Point]:
    """What the what-if feed would have scraped: a known sim profile, in virtual time."""
    return scrape_run(H100, 30.0)
