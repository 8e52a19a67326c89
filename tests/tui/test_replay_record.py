"""The `r` key records the live TUI's polls (sim on 127.0.0.1), and the file replays."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.recording.reader import read_recording
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.tui.app import LlmtopApp
from llmtop.tui.widgets.header import StatusHeader
from tests.support.fake_gpu import FakeGpuBackend


async def _wait_polls(pilot: Any, recorder: Recorder, n: int) -> None:
    deadline = time.monotonic() + 10
    while recorder.polls_written < n and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert recorder.polls_written >= n


async def test_r_starts_and_stops_recording(
    tmp_path: Path, start_sim: Callable[..., ServerThread]
) -> None:
    sim = start_sim()
    path = tmp_path / "pressed.jsonl.gz"
    monitor = MonitorSettings(vllm_urls=(sim.url,), gateway_url=None, nvml=False, record=None)
    collector = Collector(monitor, HealthSettings(), gpu_backend=FakeGpuBackend([((), None)]))
    recorder = Recorder(path, interval_s=monitor.interval_s, targets={"vllm": [sim.url]})
    app = LlmtopApp(
        RecordingSource(collector, recorder),
        monitor=monitor,
        health=HealthSettings(),
        admin=None,
        recorder=recorder,
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await app.first_snapshot.wait()
        assert not path.exists()
        await pilot.press("r")
        assert recorder.recording
        assert app.query_one(StatusHeader).recording
        await _wait_polls(pilot, recorder, 2)
        await pilot.press("r")
        assert not recorder.recording
        assert not app.query_one(StatusHeader).recording
        written = recorder.polls_written
    rec = read_recording(path)
    assert rec.warnings == []
    assert len(rec) == written
    assert rec.raw(0).engines[0].url == sim.url
    assert rec.raw(len(rec) - 1).engines[0].samples
