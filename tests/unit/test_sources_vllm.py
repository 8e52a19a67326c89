"""sources.vllm and sources.gateway over httpx.MockTransport: every target problem is an error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from llmtop.core.base.raw import RawEngine
from llmtop.sources.gateway import GatewayReader
from llmtop.sources.vllm import metrics_url, scrape_engine

URL = "http://vllm:8000"


async def scrape(
    handler: Callable[[httpx.Request], Any], *, timeout_s: float = 1.0, max_bytes: int = 1 << 20
) -> RawEngine:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
        return await scrape_engine(c, URL, timeout_s=timeout_s, max_bytes=max_bytes)


def test_metrics_url() -> None:
    assert metrics_url("http://h:8000/") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"


async def test_real_capture_and_version(fixtures_dir: Path) -> None:
    body = (fixtures_dir / "metrics-load.txt").read_bytes()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        assert request.url.path == "/metrics"
        return httpx.Response(200, content=body, headers={"content-type": "text/plain"})

    raw = await scrape(handler)
    assert raw.error is None
    assert raw.samples is not None
    assert raw.version == "0.32.0"
    assert any(s.name == "vllm:num_requests_running" for s in raw.samples)


async def test_connection_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    raw = await scrape(handler)
    assert raw.samples is None
    assert raw.error == f"cannot connect to {URL}/metrics (connection refused)"


async def test_slow_target_times_out() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, text="")

    raw = await scrape(handler, timeout_s=0.05)
    assert raw.error == f"no answer from {URL}/metrics within 0.1 s"


async def test_html_instead_of_metrics() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, html="<html><body>Grafana</body></html>")

    raw = await scrape(handler)
    assert raw.error is not None
    assert "HTML page" in raw.error


async def test_html_without_content_type_names_the_line() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"<!doctype html>\n<p>hi</p>\n")

    raw = await scrape(handler)
    assert raw.error is not None
    assert "line 1: '<!doctype html>'" in raw.error


async def test_body_too_large_stops_reading() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"vllm:num_requests_running 1\n" * 10_000)

    raw = await scrape(handler, max_bytes=1000)
    assert raw.samples is None
    assert raw.error is not None
    assert "more than 1,000 bytes" in raw.error


async def test_malformed_text_names_the_line() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, text="vllm:num_requests_running 1\nvllm:num_requests_waiting x\n"
        )

    raw = await scrape(handler)
    assert raw.error is not None
    assert "line 2: 'vllm:num_requests_waiting x'" in raw.error


async def test_http_error_status() -> None:
    raw = await scrape(lambda request: httpx.Response(404, text="not found"))
    assert raw.error == f"HTTP 404 from {URL}/metrics"


def _stats(**kw: object) -> dict[str, object]:
    return {"time": 1.0, "in_flight": 1, "queued": 0, "limits": {"max_concurrency": 8}, **kw}


async def test_gateway_stats_token_and_new_events() -> None:
    seen_auth: list[str | None] = []
    events = [{"time": 1.0, "field": "max_concurrency", "old": 8, "new": 4, "source": "tui"}]

    def handler(request: httpx.Request) -> httpx.Response:
        seen_auth.append(request.headers.get("authorization"))
        if request.url.path == "/admin/stats":
            return httpx.Response(200, json=_stats())
        return httpx.Response(200, json={"events": list(events)})

    reader = GatewayReader("http://gw:9000", "s3cret", optional=False)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
        stats, error, new, present = await reader.read(c, 1.0)
        assert (error, new, present) == (None, (), True)  # existing events are history
        assert stats is not None
        assert stats["limits"] == {"max_concurrency": 8}
        change = {"time": 2.0, "field": "max_queue", "old": 128, "new": 64, "source": "tui"}
        events.append(change)
        _, _, new, _ = await reader.read(c, 1.0)
        assert new == (change,)
    assert set(seen_auth) == {"Bearer s3cret"}


async def test_default_gateway_absent_is_no_gateway_but_named_one_is_an_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
        assert await GatewayReader("http://gw", None, optional=True).read(c, 1.0) == (
            None,
            None,
            (),
            False,
        )
        stats, error, _, present = await GatewayReader("http://gw", None, optional=False).read(
            c, 1.0
        )
    assert stats is None
    assert present
    assert error == "cannot connect to http://gw (connection refused)"


async def test_gateway_401_and_not_json() -> None:
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(401, json={}))
    ) as c:
        _, error, _, _ = await GatewayReader("http://gw", "bad", optional=False).read(c, 1.0)
    assert error is not None
    assert "admin token rejected (401)" in error
    assert "bad" not in error.replace("http://gw", "")
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text="hello"))
    ) as c:
        _, error, _, _ = await GatewayReader("http://gw", None, optional=False).read(c, 1.0)
    assert error == "http://gw/admin/stats did not answer JSON: is this the llmtop gateway?"


async def test_default_gateway_url_with_something_else_there_is_no_gateway() -> None:
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(404, text="nginx"))
    ) as c:
        assert await GatewayReader("http://gw", None, optional=True).read(c, 1.0) == (
            None,
            None,
            (),
            False,
        )
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(401, json={}))
    ) as c:
        _, error, _, present = await GatewayReader("http://gw", None, optional=True).read(c, 1.0)
    assert present
    assert error is not None
    assert "401" in error
