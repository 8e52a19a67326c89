"""The console against a real `llmtop gateway` with history in front of a real `llmtop sim`
(processes, loopback): before it opens, someone sets the cap and pauses admission long enough for
`gateway-paused` to fire, then resumes. The console's first frame shows that past, read from the
gateway's /admin/history and folded through the live Collector's pipeline: the cap change with
its time, the pause, the finding's earlier firing, each marked, and the header naming the past.
Bounded: ~20 s (the pause has to be held for the rules' 3 s).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from harness.http_ready import wait_ready
from llmtop.core.record.decode import Recording
from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.sources.history import gateway_history
from llmtop.tui.app import LlmtopApp
from llmtop.tui.past import PastSource
from llmtop.tui.widgets.header import StatusHeader
from tests.support.tui import log_texts, until

pytestmark = [pytest.mark.slow(20), pytest.mark.timeout(120)]
ENV = {**os.environ, "LLMTOP_HISTORY": "true"}  # tests/conftest.py turns it off elsewhere


@contextmanager
def process(args: list[str]) -> Iterator[None]:
    out = subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", *args], stdout=out, stderr=out, env=ENV
    )
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def stack(folder: Path) -> Iterator[tuple[str, str]]:
    sim_port, gw_port = free_port(), free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    gw = f"http://127.0.0.1:{gw_port}"
    quick = ["--drain-grace-s", "0", "--drain-timeout-s", "1"]
    with process(["sim", "--port", str(sim_port), "--profile", "fast"]):
        wait_ready(sim + "/health")
        gateway = ["gateway", "--vllm", sim, "--listen", f"127.0.0.1:{gw_port}", *quick]
        with process([*gateway, "--history-dir", str(folder)]):
            wait_ready(gw + "/healthz")
            yield sim, gw


async def before_the_console(gw: str) -> float:
    """The cap set to 4 by `carol`, admission paused with two requests waiting for 5 s, then
    resumed; the time of the change."""
    async with httpx.AsyncClient(base_url=gw, timeout=30) as c:
        r = await c.patch(
            "/admin/limits", json={"max_concurrency": 4}, headers={"x-llmtop-source": "carol"}
        )
        assert r.status_code == 200
        assert (await c.post("/admin/pause")).status_code == 200
        body = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 8}
        waiting = [asyncio.create_task(c.post("/v1/completions", json=body)) for _ in range(2)]
        await asyncio.sleep(5.0)
        assert (await c.post("/admin/resume")).status_code == 200
        assert [a.status_code for a in await asyncio.gather(*waiting)] == [200, 200]
        await asyncio.sleep(1.5)  # a poll or two after the resume reach the history
        events = (await c.get("/admin/events")).json()["events"]
        (change,) = [e for e in events if e.get("field") == "max_concurrency"]
        return float(change["time"])


async def test_the_console_opens_with_the_gateways_history(tmp_path: Path) -> None:
    with stack(tmp_path / "state") as (sim, gw):
        changed_at = await before_the_console(gw)
        monitor = MonitorSettings(vllm_urls=(sim,), gateway_url=gw, nvml=False)
        collector = Collector(monitor, HealthSettings())

        async def fetch(since_s: float) -> Recording:
            return await gateway_history(gw, None, since_s)

        past = PastSource(
            collector, fetch, source="gateway", asked_s=3600.0, live_urls=[sim], wait_s=10.0
        )
        app = LlmtopApp(past, monitor=monitor, health=HealthSettings(), admin=None, past=past)
        async with app.run_test(size=(120, 40)) as pilot:
            assert await until(pilot, app.first_snapshot.is_set, timeout_s=20)
            await pilot.pause()
            assert past.in_time
            lines = log_texts(app)
            header = app.query_one(StatusHeader).render().plain
    assert "past: gateway" in header
    (cap,) = [e for e in app.events if e.text.startswith("limits (before you connected)")]
    assert cap.text.endswith(" -> 4 (by carol)")  # the gateway's cap, set to 4, and who did
    assert abs(cap.time - changed_at) <= 1.5  # the poll that saw it
    assert "admission PAUSED (before you connected)" in lines
    assert any(t.startswith("warning gateway-paused (before you connected") for t in lines)
    assert any(t.startswith("connected: the lines above are") for t in lines)
