"""Behaviour at 80x24: a slow or failing source never freezes or crashes the screen, stale data
is marked, a dead target says DOWN and why, NO_COLOR holds, and the real Collector drives it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.snapshot import Snapshot
from llmtop.errors import ScrapeError
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.widgets.chart import TimeChart
from tests.support import story
from tests.support.tui import (
    SilentSource,
    down_snapshot,
    log_texts,
    make_app,
    panel_text,
    panels,
    settle,
    until,
)

SIZE = (80, 24)


def header_text(app: LlmtopApp) -> str:
    return str(app.query_one("#header").render().plain)  # type: ignore[union-attr]


async def test_a_source_that_never_answers_does_not_freeze_the_keys() -> None:
    source = SilentSource()
    app = make_app(source, history=[])
    async with app.run_test(size=SIZE) as pilot:
        assert await until(pilot, lambda: source.started == 1)
        assert "waiting for the first poll" in header_text(app)
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape", "q")
    assert source.closed


class FailingSource:
    """Answers once (the story's healthy moment), then raises like a target gone bad."""

    def __init__(self) -> None:
        self.polls = 0

    async def poll(self) -> Snapshot:
        self.polls += 1
        if self.polls == 1:
            return story.upto(story.MOMENTS["healthy"])[-1]
        raise ScrapeError("http://10.0.0.7:8000/metrics: not Prometheus text (line 1: '<html>')")

    async def aclose(self) -> None:
        pass


async def test_a_failing_source_is_shown_and_the_data_marked_stale() -> None:
    source = FailingSource()
    app = make_app(source, history=[], interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        assert await until(pilot, lambda: source.polls >= 3)
        assert await until(pilot, lambda: "STALE" in header_text(app))
        findings = panel_text(app, "#findings")
        assert "POLL  failed: http://10.0.0.7:8000/metrics: not Prometheus text" in findings
        assert any(
            t.startswith("poll failed: http://10.0.0.7:8000/metrics") for t in log_texts(app)
        )
        # one line per distinct error, not one per poll
        assert len([t for t in log_texts(app) if t.startswith("poll failed")]) == 1


async def test_old_data_is_marked_stale_after_two_intervals() -> None:
    now = [0.0]
    app = make_app(SilentSource(), moment="healthy", clock=lambda: now[0], interval_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        assert app.snapshot is not None
        assert app.snapshot.status == "ok"  # what the rules said at that moment
        assert " OK " in header_text(app)
        assert "STALE" not in header_text(app)
        now[0] = 0.5
        assert await until(pilot, lambda: "STALE" in header_text(app))
        assert "DEGRADED" in header_text(app)


async def test_a_dead_target_says_down_and_why() -> None:
    down = down_snapshot()
    app = make_app(SilentSource(), history=[down])
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        assert header_text(app).startswith(" DOWN ")
        findings = panel_text(app, "#findings")
        # the rules' target-down finding carries the scrape's error
        (f,) = down.findings
        assert f"{f.id} [{f.bottleneck}] {f.summary}" in findings
        assert "connection refused" in f.summary
        kv = panel_text(app, "#kv")
        assert "n/a" in kv
        assert "0%" not in kv


async def test_80x24_shows_every_panel_and_each_finding_with_its_action() -> None:
    app = make_app(moment="kv-exhausted")
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        screen = app.screen.region
        for panel in panels(app):
            r = panel.region
            assert r.height >= 2, (panel.id, r)
            assert screen.contains_region(r), (panel.id, r)
            if panel.id != "findings":  # findings wrap; the numbers panels must not
                lines = panel.render().plain.splitlines()
                assert all(len(line) <= r.width - 2 for line in lines), (panel.id, lines)
        assert not app.query_one("#charts").display
        text = panel_text(app, "#findings")
        shown = " ".join(text.split())  # the panel wraps long lines
        assert app.snapshot is not None
        assert app.snapshot.findings  # the rules fire at this moment of the story
        for f in app.snapshot.findings:
            assert f"{f.id} [{f.bottleneck}] {' '.join(f.summary.split())}" in shown
            assert f"→ {' '.join(f.action.split())}" in shown


async def test_charts_use_the_space_at_200x50() -> None:
    app = make_app(moment="after-cap")
    async with app.run_test(size=(200, 50)) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        assert app.query_one("#charts").display
        ttft = app.query_one("#ttft-chart", TimeChart)
        assert ttft.region.height >= 10
        assert await until(pilot, lambda: ttft.data is not None)  # mounted after the first frame
        assert ttft.data is not None
        assert ttft.data.hline == HealthSettings().slo.ttft_s
        # thinned to what the chart can show (two braille dots a cell), the newest kept
        xs = ttft.data.series[0].xs
        assert len(xs) <= 2 * ttft.size.width
        assert xs[-1] == 0.0
        span = app.history[-1].time - app.history[0].time
        assert xs[0] <= -0.95 * span


def test_no_color_renders_in_grey(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(moment="kv-exhausted")
    assert app.no_color

    async def run() -> str:
        async with app.run_test(size=SIZE) as pilot:
            await app.first_snapshot.wait()
            await pilot.pause()
            return app.export_screenshot()

    svg = asyncio.run(run())
    # c5c8c6 is the SVG template's default foreground, not something the app drew
    colours = set(re.findall(r"(?:fill|color):\s*#([0-9a-f]{6})", svg)) - {"c5c8c6"}
    assert colours
    greys = {c for c in colours if c[0:2] == c[2:4] == c[4:6]}
    assert greys == colours, colours - greys


def _metrics_app(text: str) -> Starlette:
    async def metrics(request: Request) -> Response:
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    return Starlette(routes=[Route("/metrics", metrics)])


async def test_the_real_collector_and_gateway_drive_the_screen(
    serve_app: Callable[[Any], ServerThread],
    start_gateway: Callable[..., ServerThread],
    fixtures_dir: Path,
) -> None:
    from llmtop.sources.collector import Collector

    engine = serve_app(_metrics_app((fixtures_dir / "metrics-load.txt").read_text()))
    gw = start_gateway(engine.url, max_concurrency=8)
    monitor = MonitorSettings(
        vllm_urls=(engine.url,), gateway_url=gw.url, interval_s=0.5, nvml=False
    )
    health = HealthSettings()
    app = LlmtopApp(
        Collector(monitor, health), monitor=monitor, health=health, admin=AdminClient(gw.url)
    )
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        # on a loaded machine a scrape may miss its deadline (0.8 x interval): wait for one
        assert await until(
            pilot, lambda: app.snapshot is not None and app.snapshot.engines[0].up, 30.0
        )
        assert "tinyllm" in header_text(app)
        await pilot.press("plus")
        await settle(app, pilot)

        def shows_cap_9() -> bool:
            s = app.snapshot
            return s is not None and s.gateway is not None and s.gateway.max_concurrency == 9

        assert await until(pilot, shows_cap_9, 30.0)
        # the next polls keep the new limit (no flapping back)
        polls = len(app.history)
        assert await until(pilot, lambda: len(app.history) >= polls + 2, 30.0)
        assert shows_cap_9()
        gateway_panel = panel_text(app, "#gateway")
        assert "/9" in gateway_panel


async def test_exit_after_s_ends_the_app_by_itself_and_closes_its_source() -> None:
    """`llmtop demo --duration-s`: the app's own timer ends it with 0, no thread outside it."""
    source = SilentSource()
    app = make_app(source, history=[], exit_after_s=0.3)
    async with app.run_test(size=SIZE) as pilot:
        assert app.is_running
        assert await until(pilot, lambda: not app.is_running, 10.0)
    assert app.return_code == 0
    assert source.closed
