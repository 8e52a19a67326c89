"""The TUI on one of several gateways sharing limits through a real Redis, over two replicas:
the gateway panel's title carries each replica's in flight and the global figure, at 80x24."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from harness.redis_server import redis_server
from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from tests.support.tui import panel


def _engine(text: str) -> Starlette:
    async def metrics(request: Request) -> Response:
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def health(request: Request) -> Response:
        return PlainTextResponse("")

    return Starlette(routes=[Route("/metrics", metrics), Route("/health", health)])


async def test_the_gateway_panel_shows_replicas_and_the_shared_limits(
    serve_app: Callable[[Any], ServerThread],
    start_gateway: Callable[..., ServerThread],
    fixtures_dir: Path,
) -> None:
    from llmtop.sources.collector import Collector

    engine = serve_app(_engine((fixtures_dir / "metrics-load.txt").read_text()))
    dead = f"http://127.0.0.1:{free_port()}"
    with redis_server() as server:
        gw = start_gateway(f"{engine.url},{dead}", max_concurrency=8, redis_url=server.url)
        app_state: Any = gw._server.config.app.state.gateway  # type: ignore[union-attr]
        app_state.balancer.fail(app_state.balancer.replicas[1], "upstream unreachable")
        monitor = MonitorSettings(
            vllm_urls=(engine.url,), gateway_url=gw.url, interval_s=0.5, nvml=False
        )
        health = HealthSettings()
        app = LlmtopApp(
            Collector(monitor, health), monitor=monitor, health=health, admin=AdminClient(gw.url)
        )
        async with app.run_test(size=(80, 24)) as pilot:
            deadline = time.monotonic() + 30
            gateway = panel(app, "#gateway")
            while "redis" not in str(gateway.border_title):
                assert time.monotonic() < deadline, gateway.border_title
                await pilot.pause(0.1)
            title = str(gateway.border_title)
            assert "0|0x" in title  # two replicas, the second out of service
            assert "/8×1" in title  # slots held by all gateways / the cap, one gateway live
            assert app.screen.scrollbars_enabled == (False, False)
            assert len(title) + 2 <= gateway.size.width, (title, gateway.size.width)  # fits
            server.kill()
            while "REDIS FALLBACK" not in str(gateway.border_title):
                assert time.monotonic() < deadline, gateway.border_title
                await pilot.pause(0.1)
