"""Collector over httpx.MockTransport: all targets at once, problems become error fields."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from llmtop.core.base.snapshot import GpuStats
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector, target_timeout
from tests.support.fake_gpu import FakeGpuBackend

GOOD = "http://good:8000"
BAD = "http://bad:8000"
SLOW = "http://slow:8000"


def test_timeout_stays_below_interval() -> None:
    assert target_timeout(1.0) < 1.0
    assert target_timeout(0.1) == 0.2
    assert target_timeout(60.0) == 10.0


async def test_read_and_poll_all_targets(fixtures_dir: Path) -> None:
    body = (fixtures_dir / "metrics-load.txt").read_text()
    idle = (fixtures_dir / "metrics-idle.txt").read_text()
    calls = {"n": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host == "good" and request.url.path == "/metrics":
            calls["n"] += 1
            return httpx.Response(200, text=idle if calls["n"] == 1 else body)
        if host == "good":
            return httpx.Response(404)
        if host == "slow":
            await asyncio.sleep(5)
        raise httpx.ConnectError("Connection refused", request=request)

    clock = iter([100.0, 110.0])
    monitor = MonitorSettings(vllm_urls=(GOOD, BAD, SLOW), gateway_url="http://127.0.0.1:9000")
    collector = Collector(
        monitor,
        HealthSettings(fire_after_s=0.0),
        transport=httpx.MockTransport(handler),
        gpu_backend=FakeGpuBackend([RuntimeError("NVML exploded")]),
        clock=lambda: next(clock),
        timeout_s=0.1,
    )
    try:
        first = await collector.poll()
        assert collector.last_raw is not None
        assert collector.last_raw.time == 100.0
        assert collector.last_raw.gateway_url is None  # default gateway absent: no gateway
        assert first.gateway is None
        snap = await collector.poll()
    finally:
        await collector.aclose()
    good, bad, slow = snap.engines
    assert good.up
    assert good.version is None  # /version answered 404
    assert good.decode_tok_per_s is not None
    assert not bad.up
    assert bad.error == f"cannot connect to {BAD}/metrics (connection refused)"
    assert not slow.up
    assert slow.error is not None
    assert "no answer" in slow.error
    assert snap.gpu_error == "GPU readings failed: NVML exploded"
    assert {f.id for f in snap.findings} >= {"target-down", "kv-exhausted"}
    assert snap.status == "critical"


async def test_gpus_and_gateway_events_flow_into_the_raw_poll() -> None:
    g = GpuStats(index=0, name="H100", temp_c=70)
    events = {"events": [{"time": 1, "field": "paused", "old": False, "new": True, "source": "x"}]}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "gw":
            if request.url.path == "/admin/stats":
                return httpx.Response(200, json={"in_flight": 2, "queued": 0, "limits": {}})
            return httpx.Response(200, json=events)
        return httpx.Response(200, text='vllm:num_requests_running{engine="0"} 1\n')

    monitor = MonitorSettings(vllm_urls=(GOOD,), gateway_url="http://gw")
    collector = Collector(
        monitor,
        HealthSettings(),
        transport=httpx.MockTransport(handler),
        gpu_backend=FakeGpuBackend([((g,), None)]),
    )
    try:
        raw = await collector.read()
        snap = collector.pipeline.update(raw)
    finally:
        await collector.aclose()
    assert raw.gpus == (g,)
    assert raw.gateway_url == "http://gw"
    assert snap.gateway is not None
    assert snap.gateway.in_flight == 2
    assert snap.engines[0].running == 1.0
