"""Collector against real servers on 127.0.0.1: slow, HTML, oversized, malformed, down, good."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from tests.support.fake_gpu import FakeGpuBackend


def targets_app(load_text: str) -> Starlette:
    async def metrics(request: Request) -> Response:
        kind = request.path_params["kind"]
        if kind == "good":
            return PlainTextResponse(load_text)
        if kind == "slow":
            await asyncio.sleep(10)
            return PlainTextResponse(load_text)
        if kind == "html":
            return HTMLResponse("<html><body>Grafana login</body></html>")
        if kind == "huge":

            async def body() -> AsyncIterator[bytes]:
                for _ in range(1000):
                    yield b"vllm:num_requests_running 1\n" * 100

            return StreamingResponse(body(), media_type="text/plain")
        return PlainTextResponse("vllm:num_requests_running{engine=0} 1\n")  # malformed

    async def version(request: Request) -> Response:
        return Response('{"version": "0.32.0"}', media_type="application/json")

    return Starlette(
        routes=[
            Route("/{kind}/metrics", metrics),
            Route("/{kind}/version", version),
        ]
    )


async def test_every_target_problem_is_an_error_field(
    serve_app: Callable[[Any], ServerThread], fixtures_dir: Path
) -> None:
    server = serve_app(targets_app((fixtures_dir / "metrics-load.txt").read_text()))
    kinds = ("good", "slow", "html", "huge", "bad")
    monitor = MonitorSettings(
        vllm_urls=tuple(f"{server.url}/{k}" for k in kinds),
        gateway_url=None,
        max_scrape_bytes=64 * 1024,
    )
    collector = Collector(
        monitor,
        HealthSettings(),
        gpu_backend=FakeGpuBackend([((), "no NVIDIA GPU visible")]),
        timeout_s=0.5,
    )
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        snap = await collector.poll()
        elapsed = loop.time() - started
    finally:
        await collector.aclose()
    by_kind = dict(zip(kinds, snap.engines, strict=True))
    assert by_kind["good"].up
    assert by_kind["good"].version == "0.32.0"
    assert by_kind["good"].running == 4.0
    assert "no answer" in (by_kind["slow"].error or "")
    assert "HTML page" in (by_kind["html"].error or "")
    assert "more than 65,536 bytes" in (by_kind["huge"].error or "")
    assert "line 1" in (by_kind["bad"].error or "")
    assert snap.gpu_error == "no NVIDIA GPU visible"
    assert elapsed < 4.0  # the slow target (10 s) was cut at its 0.5 s timeout, not waited for


async def test_target_down(unused_tcp_port: int) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}"
    collector = Collector(
        MonitorSettings(vllm_urls=(url,), gateway_url=None, nvml=False), HealthSettings()
    )
    try:
        snap = await collector.poll()
    finally:
        await collector.aclose()
    assert not snap.engines[0].up
    assert snap.engines[0].error == f"cannot connect to {url}/metrics (connection refused)"
    assert snap.status == "unknown"
