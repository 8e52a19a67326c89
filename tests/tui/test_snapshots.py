"""Snapshot tests (pytest-textual-snapshot): the screen in each scripted state, deterministic.

Scripted snapshots, a frozen age clock and TZ=UTC make every render the same; update with
`pytest tests/tui/test_snapshots.py --snapshot-update` and look at the SVGs before committing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.core.snapshot import EngineStats, Snapshot
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.scripted import upto
from llmtop.tui.source import ScriptedSource
from tests.tui.conftest import make_app

SnapCompare = Callable[..., bool]


def _ready(app: LlmtopApp) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await app.first_snapshot.wait()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("phase", ["healthy", "batching-cliff", "kv-exhausted", "after-cap"])
def test_states_at_80x24(snap_compare: SnapCompare, phase: str) -> None:
    app = make_app(phase=phase)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_ready(app))


def test_after_cap_at_120x36_with_charts(snap_compare: SnapCompare) -> None:
    app = make_app(phase="after-cap")
    assert snap_compare(app, terminal_size=(120, 36), run_before=_ready(app))


def test_target_down_read_only(snap_compare: SnapCompare) -> None:
    down = Snapshot(
        time=upto("healthy")[-1].time,
        engines=(EngineStats(url="http://127.0.0.1:8000", up=False, error="connection refused"),),
        status="unknown",
    )
    app = make_app(ScriptedSource([down]), history=[down], read_only=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_ready(app))


def test_help_screen(snap_compare: SnapCompare) -> None:
    app = make_app(phase="healthy")
    assert snap_compare(
        app, press=["question_mark"], terminal_size=(80, 24), run_before=_ready(app)
    )


def test_command_line_open(snap_compare: SnapCompare) -> None:
    # the line only opens here: nothing is sent to this (absent) gateway
    app = make_app(phase="kv-exhausted", admin=AdminClient("http://127.0.0.1:9"))
    assert snap_compare(
        app, press=["colon", *"cap 8"], terminal_size=(80, 24), run_before=_ready(app)
    )


def test_pause_question(snap_compare: SnapCompare) -> None:
    app = make_app(phase="after-cap")

    async def run_before(pilot: Pilot[Any]) -> None:
        await app.first_snapshot.wait()
        app._confirm_pause(paused=False)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
