"""Snapshot tests (pytest-textual-snapshot): the screen at moments of the recorded demo, replayed.

Each render is the live screen fed by a paused replay of tests/fixtures/demo-story.jsonl.gz
(tests/support/story.py): the numbers are the recorded run's and the findings are what the current
rules compute from them, so a rule change shows here as a changed snapshot. A frozen age clock
and TZ=UTC make every render the same; update with
`pytest tests/tui/test_snapshots.py --snapshot-update` and look at the SVGs before committing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.core.health.rulebase import suggested_cap
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from tests.support import story
from tests.support.tui import SilentSource, down_snapshot, make_app

SnapCompare = Callable[..., bool]


def _ready(app: LlmtopApp) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await app.first_snapshot.wait()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("moment", list(story.MOMENTS))
def test_moments_at_80x24(snap_compare: SnapCompare, moment: str) -> None:
    app = make_app(moment=moment)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_ready(app))


def test_after_cap_at_120x36_with_charts(snap_compare: SnapCompare) -> None:
    app = make_app(moment="after-cap")
    assert snap_compare(app, terminal_size=(120, 36), run_before=_ready(app))


def test_target_down_read_only(snap_compare: SnapCompare) -> None:
    down = down_snapshot()
    app = make_app(SilentSource(), history=[down], read_only=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_ready(app))


def test_help_screen(snap_compare: SnapCompare) -> None:
    app = make_app(moment="healthy")
    assert snap_compare(
        app, press=["question_mark"], terminal_size=(80, 24), run_before=_ready(app)
    )


def test_command_line_open(snap_compare: SnapCompare) -> None:
    # typing the cap the finding on screen suggests; the line only opens here: nothing is sent
    # to this (absent) gateway
    app = make_app(moment="kv-exhausted", admin=AdminClient("http://127.0.0.1:9"))
    advice = suggested_cap(story.upto(story.MOMENTS["kv-exhausted"])[-1].findings)
    assert advice is not None
    assert snap_compare(
        app, press=["colon", *f"cap {advice[0]}"], terminal_size=(80, 24), run_before=_ready(app)
    )


def test_pause_question(snap_compare: SnapCompare) -> None:
    app = make_app(moment="after-cap")

    async def run_before(pilot: Pilot[Any]) -> None:
        await app.first_snapshot.wait()
        app.controls.ask_pause(paused=False)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
