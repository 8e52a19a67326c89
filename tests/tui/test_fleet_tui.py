"""The replica table (Pilot): a fleet's rows worst first with their numbers, at 80x24 too, one
replica's full view on Enter and back on Esc, a hundred replicas without a scrollbar.

The three-replica screens replay a real run (tests/support/fleet_story.py); the hundred replicas
are scrapes built as vLLM 0.32 writes them (tests/unit/test_fleet.py) through the
FleetPipeline. Every expected figure is read from what the pipeline computed, formatted by the
same `core.base.format` the table uses; no figure or finding text is written here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from llmtop.core.base import format as fmt
from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Fleet, FleetSnapshot
from llmtop.core.derive.aggregate import combine
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.tui.app import LlmtopApp
from llmtop.tui.screens.replica import ReplicaScreen
from llmtop.tui.view.chart_data import CombinedEngines, throughput_chart, ttft_chart
from llmtop.tui.widgets.findings import FindingsPanel
from llmtop.tui.widgets.kv import KvPanel
from llmtop.tui.widgets.replicas import ReplicaTable
from tests.support import fleet_story
from tests.support.fleet import raw, scrape, url
from tests.support.tui import SilentSource, make_app

SnapCompare = Callable[..., bool]


def table_lines(app: LlmtopApp) -> list[str]:
    return app.query_one(ReplicaTable).render().plain.splitlines()


def expected_cells(fleet: Fleet, i: int) -> list[str]:
    """The numbers row i must show, from the pipeline's own figures."""
    e = fleet.replicas[i].stats
    return [
        fmt.frac(e.kv_cache_usage_frac),
        f"{fmt.num(e.running, 0)}/{fmt.num(e.waiting, 0)}",
        fmt.dur(e.ttft_p95_s),
        fmt.num(e.decode_tok_per_s),
    ]


def fully_inside(app: LlmtopApp, widget: ReplicaTable) -> bool:
    r, screen = widget.region, app.screen.region
    return r.height > 0 and r.y >= screen.y and r.bottom <= screen.bottom


def test_the_recorded_fleet_replays_through_the_fleet_pipeline() -> None:
    snap = fleet_story.at(fleet_story.OVERLOADED_S)
    assert snap.fleet is not None
    worst = snap.fleet.replicas[0]
    waiting = [r.stats.waiting or 0.0 for r in snap.fleet.replicas]
    assert worst.stats.waiting == max(waiting)  # the drowning replica leads
    assert waiting[1] == waiting[2] == 0
    outlier = next(f for f in snap.findings if f.id == "replica-outlier")
    assert outlier.summary.startswith(f"{worst.name} stands out: waiting ")
    assert worst.findings[0].id == "kv-exhausted"
    assert snap.status == "critical"


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
async def test_the_table_names_the_overloaded_replica_first_with_its_numbers(
    size: tuple[int, int],
) -> None:
    app = fleet_story.app_at(fleet_story.OVERLOADED_S)
    snap = fleet_story.at(fleet_story.OVERLOADED_S)
    assert snap.fleet is not None
    async with app.run_test(size=size) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        table = app.query_one(ReplicaTable)
        assert table.display
        assert fully_inside(app, table)
        assert not table.show_vertical_scrollbar
        lines = table_lines(app)
        assert lines[0].split()[:2] == ["replica", "KV"]  # one model: the header shows it
        rows = lines[1:]
        assert len(rows) == 3  # every replica, no "more" line
        for i, r in enumerate(snap.fleet.replicas):
            assert r.name in rows[i]
            for cell in expected_cells(snap.fleet, i):
                assert cell in rows[i]
        assert snap.fleet.replicas[0].findings[0].id in rows[0]
        assert rows[1].rstrip().endswith("ok")
        # most severe first (the badge and the first finding agree); within a severity the
        # fleet's own findings lead a single replica's
        panel = app.query_one(FindingsPanel).render().plain
        assert panel.lstrip().startswith("CRIT")
        assert panel.index("kv-exhausted") < panel.index("replica-outlier")
        assert app.snapshot is not None
        warnings = [f.id for f in app.snapshot.findings if f.severity == "warning"]
        own = [i for i in warnings if i in ("replica-outlier", "load-imbalance")]
        others = [i for i in warnings if i not in own]
        assert own  # this moment of the recording has both fleet findings
        for other in others:
            assert max(panel.index(o) for o in own) < panel.index(other)
        assert "load-imbalance" in panel


async def test_enter_opens_a_replica_down_moves_esc_returns() -> None:
    app = fleet_story.app_at(fleet_story.OVERLOADED_S)
    snap = fleet_story.at(fleet_story.OVERLOADED_S)
    assert snap.fleet is not None
    first, second = snap.fleet.replicas[:2]
    async with app.run_test(size=(100, 30)) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ReplicaScreen)
        assert screen.replica_name == first.name
        own = screen.query_one(FindingsPanel)
        assert first.name in str(own.border_title)
        text = own.render().plain
        assert first.findings[0].id in text
        assert "replica-outlier" not in text  # its own findings, not the fleet's
        await pilot.press("down")
        await pilot.pause()
        assert screen.replica_name == second.name
        assert "serving within SLO" in screen.query_one(FindingsPanel).render().plain
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ReplicaScreen)
        assert app.query_one(ReplicaTable).selected == second.key


def hundred(hot: int = 57) -> list[FleetSnapshot]:
    """A hundred replicas for 12 s, replica `hot` drowning (waiting 40, KV full)."""
    p = FleetPipeline(HealthSettings())
    out = []
    for t in range(1, 13):
        engines = tuple(
            raw(url(i), scrape(t, **({"waiting": 40, "kv": 1.0, "running": 8} if i == hot else {})))  # type: ignore[arg-type]
            for i in range(100)
        )
        snap = p.update(RawPoll(time=1_796_000_000.0 + t, engines=engines))
        assert isinstance(snap, FleetSnapshot)
        out.append(snap)
    return out


async def test_a_hundred_replicas_at_80x24_show_the_worst_without_a_scrollbar() -> None:
    history = hundred()
    fleet = history[-1].fleet
    assert fleet is not None
    app = LlmtopApp(
        SilentSource(),
        monitor=MonitorSettings(vllm_urls=(url(0), url(1)), gateway_url=None, nvml=False),
        health=HealthSettings(),
        admin=None,
        history=history,
        clock=lambda: 0.0,
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        table = app.query_one(ReplicaTable)
        assert fully_inside(app, table)
        assert not table.show_vertical_scrollbar
        lines = table_lines(app)
        assert len(lines) == table.content_region.height  # exactly the lines it has
        rows, more = lines[1:-1], lines[-1]
        assert len(rows) >= 4
        assert fleet.replicas[0].name == "10.0.0.57:8000"
        assert fleet.replicas[0].name in rows[0]
        for cell in expected_cells(fleet, 0):
            assert cell in rows[0]
        assert more.startswith(f"… {100 - len(rows)} more below")
        for _ in range(len(rows) + 2):  # past the bottom: the selection stays in sight
            await pilot.press("down")
        await pilot.pause()
        selected = fleet.replicas[len(rows) + 2]
        assert table.selected == selected.key
        assert any(selected.name in line for line in table_lines(app)[1:-1])
        assert "above" in table_lines(app)[-1]
        # the single-engine panels hidden under the table compute nothing
        assert all(panel.view is None for panel in app.query(KvPanel))


def test_charts_from_remembered_engines_are_the_combined_ones() -> None:
    history = hundred()
    memo = CombinedEngines(size=len(history))
    assert ttft_chart(history, 2.0, 8, engine_of=memo) == ttft_chart(history, 2.0, 8)
    assert throughput_chart(history, 8, engine_of=memo) == throughput_chart(history, 8)
    newest = memo(history[-1])
    assert newest == combine(history[-1].engines)
    assert memo(history[-1]) is newest  # combined once
    small = CombinedEngines(size=2)
    oldest = small(history[0])
    for snap in history[1:3]:
        small(snap)
    assert small(history[0]) is not oldest  # dropped with the oldest, combined again
    assert small(history[0]) == oldest


async def test_one_engine_has_no_table_and_no_replica_keys() -> None:
    app = make_app(moment="healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        assert not app.query(ReplicaTable)  # one engine's screen: not a widget more
        assert not app.check_action("open_replica", ())
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ReplicaScreen)


def _ready(app: LlmtopApp) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await app.first_snapshot.wait()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
def test_fleet_snapshot(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app = fleet_story.app_at(fleet_story.OVERLOADED_S)
    assert snap_compare(app, terminal_size=size, run_before=_ready(app))


def test_replica_view_snapshot(snap_compare: SnapCompare) -> None:
    app = fleet_story.app_at(fleet_story.OVERLOADED_S)
    assert snap_compare(app, press=["enter"], terminal_size=(120, 36), run_before=_ready(app))
