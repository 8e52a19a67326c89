"""Recording a live run: the Collector against a real sim and gateway on 127.0.0.1.

The gateway requires an admin token; the recording must hold every poll the collector read
(limit changes included) and never the token, in any form.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import GpuStats, Snapshot
from llmtop.recording.reader import read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.sources.gateway import AdminClient
from tests.support.fake_gpu import FakeGpuBackend

TOKEN = "tok-3f9a1c77d2e04b5a"
GPU = GpuStats(index=0, name="fake", util_frac=0.5, processes=("vllm",))


async def test_a_live_run_records_every_poll_and_never_the_token(
    tmp_path: Path,
    start_sim: Callable[..., ServerThread],
    start_gateway: Callable[..., ServerThread],
) -> None:
    sim = start_sim()
    gw = start_gateway(sim.url, admin_token=TOKEN, max_concurrency=16)
    path = tmp_path / "live.jsonl.gz"
    monitor = MonitorSettings(
        vllm_urls=(sim.url,),
        gateway_url=gw.url,
        admin_token=TOKEN,
        nvml=False,
        interval_s=0.5,
        record=str(path),
    )
    collector = Collector(monitor, HealthSettings(), gpu_backend=FakeGpuBackend([((GPU,), None)]))
    recorder = Recorder.from_settings(monitor)
    recorder.open()
    source = RecordingSource(collector, recorder)
    admin = AdminClient(gw.url, TOKEN)
    seen: list[RawPoll] = []
    live: list[Snapshot] = []
    try:
        for i in range(6):
            if i == 3:
                await admin.set_limits(max_concurrency=4)
            live.append(await source.poll())
            assert collector.last_raw is not None
            seen.append(collector.last_raw)
    finally:
        await admin.aclose()
        await source.aclose()
    assert not recorder.recording

    data = gzip.decompress(path.read_bytes())
    assert TOKEN.encode() not in data
    assert b"Bearer" not in data
    rec = read_recording(path)
    assert rec.warnings == []
    assert rec.header["targets"]["gateway"] == gw.url
    assert list(rec) == seen
    assert all(r.engines[0].samples for r in rec)
    events = [e for r in rec for e in r.events]
    assert [(e["field"], e["old"], e["new"]) for e in events] == [("max_concurrency", 16, 4)]
    snaps = ReplaySource(rec, HealthSettings()).snapshots()
    assert snaps == live  # replaying gives exactly what the live screen showed
    assert snaps[-1].gateway is not None
    assert snaps[-1].gateway.max_concurrency == 4
    assert snaps[0].engines[0].up
    assert rec.raw(0).gpus == (GPU,)
