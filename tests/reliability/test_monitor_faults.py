"""The monitor when its targets misbehave: down, slower than the poll interval, flapping,
answering HTML, answering a 10 MB body, sending malformed text, and NVML raising. The real
Collector polls real servers on 127.0.0.1 in a loop and never raises; the real TUI (Pilot, 80x24)
keeps polling, keeps answering keys and shows what is wrong, in words, on the screen.

tests/integration/test_collector.py checks one poll per problem; these poll repeatedly and drive
the TUI with each.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.snapshot import GpuStats
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.sources.gpu.backend import NvmlBackend
from llmtop.tui.app import LlmtopApp
from tests.support.faults import FIGURES

INTERVAL_S = 0.25
TIMEOUT_S = 1.0
"""Per-target timeout: above the interval here so a loaded box still reads 1 MiB in time;
the slow target takes half as long again."""
CAP = 1 << 20
"""max_scrape_bytes for these tests: 1 MiB, so the 10 MB body is cut at a tenth."""
HUGE = 10 * 1000 * 1000
LOAD = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_text()


class Targets:
    """One server with a misbehaving /metrics per path; counts what it sent."""

    def __init__(self) -> None:
        self.flap_calls = 0
        self.huge_sent = 0
        self.huge_finished = 0

    def app(self) -> Starlette:
        async def metrics(request: Request) -> Response:
            kind = request.path_params["kind"]
            if kind == "slow":
                await asyncio.sleep(TIMEOUT_S * 1.5)
                return PlainTextResponse(LOAD)
            if kind == "flap":
                self.flap_calls += 1
                if self.flap_calls % 2 == 0:
                    return PlainTextResponse("upstream connect error", status_code=503)
                return PlainTextResponse(LOAD)
            if kind == "html":
                return HTMLResponse("<html><body><h1>Sign in</h1></body></html>")
            if kind == "huge":
                return StreamingResponse(self._huge(request), media_type="text/plain")
            if kind == "malformed":
                return PlainTextResponse("vllm:num_requests_running{engine=0} 1\n")
            return PlainTextResponse(LOAD)

        async def version(request: Request) -> Response:
            return Response('{"version": "0.32.0"}', media_type="application/json")

        return Starlette(
            routes=[Route("/{kind}/metrics", metrics), Route("/{kind}/version", version)]
        )

    async def _huge(self, request: Request) -> AsyncIterator[bytes]:
        line = b"vllm:num_requests_running 1\n" * 2340  # ~64 KB
        sent = 0
        while sent < HUGE and not await request.is_disconnected():
            sent += len(line)
            self.huge_sent += len(line)
            yield line
        self.huge_finished += 1


class RaisingNvml:
    """An NvmlReader whose every read raises, as pynvml does when a GPU falls off the bus."""

    class NVMLError_GpuIsLost(Exception):
        pass

    def read(self) -> tuple[GpuStats, ...]:
        raise self.NVMLError_GpuIsLost("GPU is lost")

    def close(self) -> None:
        pass


class CountingTransport(httpx.AsyncBaseTransport):
    """httpx's transport, counting the body bytes the client actually read per URL."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.read: dict[str, list[int]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        counts = self.read.setdefault(str(request.url), [])
        counts.append(0)
        inner = response.stream
        assert isinstance(inner, httpx.AsyncByteStream)
        stream: httpx.AsyncByteStream = inner

        class Counted(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in stream:
                    counts[-1] += len(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await stream.aclose()

        response.stream = Counted()
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class HungNvml:
    """An NvmlReader whose reads block, as NVML calls do when the driver hangs."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.reads = 0

    def read(self) -> tuple[GpuStats, ...]:
        self.reads += 1
        self.release.wait(30)
        return ()

    def close(self) -> None:
        pass


@pytest.fixture
def targets(serve_app: Callable[[Any], ServerThread]) -> tuple[Targets, str]:
    t = Targets()
    return t, serve_app(t.app()).url


def free_port_url() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# the fault, and words that must appear in what the user sees
FAULTS: dict[str, str] = {
    "down": "connection refused",
    "slow": "no answer",
    "html": "HTML page",
    "huge": "more than 1,048,576 bytes",
    "malformed": "line 1",
    "flap": "HTTP 503",
}


def monitor(url: str) -> MonitorSettings:
    return MonitorSettings(
        vllm_urls=(url,), gateway_url=None, interval_s=INTERVAL_S, nvml=False, max_scrape_bytes=CAP
    )


def engine_url(kind: str, base: str) -> str:
    return free_port_url() if kind == "down" else f"{base}/{kind}"


async def test_collector_polls_every_faulty_target_repeatedly_without_raising(
    targets: tuple[Targets, str],
) -> None:
    t, base = targets
    urls = {kind: engine_url(kind, base) for kind in FAULTS}
    settings = MonitorSettings(
        vllm_urls=(*urls.values(), f"{base}/good"),
        gateway_url=None,
        interval_s=INTERVAL_S,
        max_scrape_bytes=CAP,
    )
    counting = CountingTransport()
    collector = Collector(
        settings,
        HealthSettings(),
        gpu_backend=NvmlBackend(RaisingNvml()),  # type: ignore[arg-type]
        transport=counting,
        timeout_s=TIMEOUT_S,
    )
    errors: dict[str, set[str]] = {kind: set() for kind in FAULTS}
    try:
        for _ in range(4):
            snap = await collector.poll()
            by_url = {e.url: e for e in snap.engines}
            assert by_url[f"{base}/good"].up
            for kind, url in urls.items():
                e = by_url[url]
                if e.error:
                    assert not e.up
                    assert "\n" not in e.error
                    errors[kind].add(e.error)
            assert snap.gpu_error == "NVML: GPU is lost"
    finally:
        await collector.aclose()
    for kind, words in FAULTS.items():
        assert any(words in err for err in errors[kind]), (kind, errors[kind])
    assert t.flap_calls == 4  # flapping: up on odd polls, an error on even ones
    # reading stopped at the cap: at most a chunk or two past 1 MiB of the 10 MB, each poll
    huge = counting.read[urls["huge"] + "/metrics"]
    assert len(huge) == 4
    assert all(CAP < n <= CAP + 256 * 1024 for n in huge), huge
    FIGURES["faults"] += len(FAULTS) + 1


def screen_text(app: LlmtopApp) -> str:
    """What the user reads: the header, the findings, the GPU panel and the event log."""
    parts = []
    for selector in ("#header", "#findings", "#gpu", "#events"):
        parts.append(app.query_one(selector).render().plain)  # type: ignore[union-attr]
    return "\n".join(parts)


async def wait_for(pilot: Any, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.05)


async def test_tui_keeps_running_and_says_what_is_wrong(targets: tuple[Targets, str]) -> None:
    _, base = targets
    urls = [engine_url(kind, base) for kind in sorted(FAULTS)]
    settings = MonitorSettings(
        vllm_urls=(*urls, f"{base}/good"),
        gateway_url=None,
        interval_s=INTERVAL_S,
        max_scrape_bytes=CAP,
    )
    health = HealthSettings()
    collector = Collector(
        settings,
        health,
        gpu_backend=NvmlBackend(RaisingNvml()),  # type: ignore[arg-type]
        timeout_s=TIMEOUT_S,
    )
    app = LlmtopApp(collector, monitor=settings, health=health, admin=None)
    # tall enough that the findings panel lists every engine's problem
    async with app.run_test(size=(160, 60)) as pilot:
        shown = [*FAULTS.values(), "NVML: GPU is lost"]
        await wait_for(pilot, lambda: all(w in screen_text(app) for w in shown), 20)
        polls = len(app.history)
        await wait_for(pilot, lambda: len(app.history) >= polls + 2)  # still polling
        await pilot.press("question_mark")  # still answering keys
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.pause()
        # a steady fault is still on screen (the others come and go with load and flapping); a
        # busy machine can stretch one poll past its timeout, so it may take the next poll
        await wait_for(pilot, lambda: FAULTS["down"] in screen_text(app))
        await pilot.press("q")
    FIGURES["faults"] += 1


async def test_a_hung_nvml_does_not_blind_the_engine_scrape(targets: tuple[Targets, str]) -> None:
    """Each NVML read runs on a worker thread the timeout cannot stop. If every poll started
    another, a hung driver would fill the default thread pool, which also resolves host names:
    a target named `localhost` would then look down. One read at a time keeps it contained."""
    _, base = targets
    nvml = HungNvml()
    backend = NvmlBackend(nvml)  # type: ignore[arg-type]
    port = base.rsplit(":", 1)[1]
    settings = monitor(f"http://localhost:{port}/good")
    collector = Collector(settings, HealthSettings(), gpu_backend=backend, timeout_s=TIMEOUT_S)
    try:
        for _ in range(12):  # more polls than the default pool has threads (min(32, cpus + 4))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(backend.read(), 0.01)
        snap = await collector.poll()
        engine = snap.engines[0]
        assert engine.up, engine.error  # the name still resolves: the pool is not exhausted
        assert snap.gpu_error
        assert "NVML" in snap.gpu_error or "GPU readings" in snap.gpu_error
        assert nvml.reads <= 2, "every poll started another blocked NVML read"
    finally:
        nvml.release.set()
        await collector.aclose()
    FIGURES["faults"] += 1
