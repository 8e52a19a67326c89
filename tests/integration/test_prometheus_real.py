"""A real Prometheus scraping three `llmtop sim`s on loopback: llmtop's PromQL source gives the
per-replica figures llmtop computes scraping the same sims directly, and names the same outlier;
`--replica-label pod` names the replicas by a relabelled label; a `--record`ed run replays to the
same figures and findings (`llmtop replay`, `llmtop report`).

The binary is found on PATH (Debian's `prometheus` package), or installed by
.ci/install-system-tools; otherwise the test is skipped, saying why. Bounded: ~60 s.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.http_ready import wait_ready
from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import EngineStats, Fleet, FleetSnapshot, Snapshot
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.recording.postmortem import build_report
from llmtop.recording.reader import read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.fleet_collector import FleetCollector
from llmtop.sources.prometheus import PrometheusSource
from tests.support.prometheus import (
    close,
    find_prometheus,
    procs,
    start,
    start_prometheus,
    wait_scraped,
)

# Real servers under real-time load: one such module at a time (tests/conftest.py), so that
# two of them never starve each other of the 2 cores.
pytestmark = [
    pytest.mark.slow(20),
    pytest.mark.timeout(240),
    pytest.mark.xdist_group("realtime-load"),
]
WINDOW_S = 10.0
__all__ = ["procs"]  # the fixture, used by name


def by_name(fleet: Fleet) -> dict[str, EngineStats]:
    return {r.name: r.stats for r in fleet.replicas}


@dataclass
class Watched:
    """The last fleets of the three readers, the queries of each poll, and the recorded run."""

    direct: Fleet
    recent_direct: list[Fleet]
    """The direct reader's fleets of the last 3 polls, oldest first: Prometheus's instant value
    of a gauge is its last scrape's (up to a scrape interval old, more on a busy machine), so it
    is compared with the direct readings of that span."""
    via_prom: Fleet
    by_pod: Fleet
    queries: list[int]
    live: list[Snapshot]
    recording: Path


async def watch(sims: list[str], prom_url: str, recording: Path) -> Watched:
    """Poll three ways once a second for ~20 s: the sims directly; Prometheus by `instance`;
    Prometheus by `pod` through the FleetCollector `llmtop --prometheus --record` runs."""
    monitor = MonitorSettings(vllm_urls=tuple(sims), gateway_url=None, nvml=False)
    direct = FleetCollector(monitor, HealthSettings(), window_s=WINDOW_S, timeout_s=2.0)
    prom = PrometheusSource(prom_url, selector='{job="vllm"}', window_s=WINDOW_S, timeout_s=5.0)
    pipeline = FleetPipeline(HealthSettings(), window_s=WINDOW_S)
    by_pod = MonitorSettings(
        vllm_urls=(),
        gateway_url=None,
        nvml=False,
        prometheus_url=prom_url,
        prometheus_selector='{job="vllm"}',
        prometheus_window_s=WINDOW_S,
        prometheus_replica_label="pod",
        record=str(recording),
    )
    pods = FleetCollector(by_pod, HealthSettings(), timeout_s=5.0)
    recorder = Recorder.from_settings(by_pod)
    recorder.open()
    recorded = RecordingSource(pods, recorder)
    queries, live = [], []
    recent: list[Fleet] = []
    try:
        for _ in range(20):
            start = time.monotonic()
            sent = prom.queries_sent
            await direct.poll()
            assert direct.fleet is not None
            recent = [*recent[-2:], direct.fleet]
            derived = await prom.read()
            queries.append(prom.queries_sent - sent)
            pipeline.update(RawPoll(time=time.time(), engines=()), derived)
            live.append(await recorded.poll())
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    finally:
        await direct.aclose()
        await prom.aclose()
        await recorded.aclose()
    assert direct.fleet is not None
    assert pipeline.fleet is not None
    assert pods.fleet is not None
    return Watched(direct.fleet, recent, pipeline.fleet, pods.fleet, queries, live, recording)


def test_prometheus_source_matches_direct_scrapes(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    binary = find_prometheus()
    sim = [sys.executable, "-m", "llmtop", "sim", "--port", "0", "--kv-tokens", "8192"]
    sims = []
    for _ in range(3):
        proc = start(sim, procs)
        assert proc.stdout is not None
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
        assert m, "no banner from llmtop sim"
        sims.append(m.group(1))
    for url in sims:
        wait_ready(url + "/metrics", 20)
    hot = ["--concurrency", "24", "--prompt-tokens", "1500", "--output-tokens", "500"]
    for url, shape in zip(sims, (hot, ["--concurrency", "2"], ["--concurrency", "2"]), strict=True):
        load = ["--url", url, "--duration-s", "50", "--requests", "5000", *shape]
        start([sys.executable, "-m", "llmtop", "load", *load], procs)
    targets = [u.removeprefix("http://") for u in sims]
    prom_url = start_prometheus(binary, targets, tmp_path, procs)
    time.sleep(WINDOW_S)  # let Prometheus fill one window

    seen = asyncio.run(watch(sims, prom_url, tmp_path / "prom.jsonl.gz"))
    direct, via_prom = seen.direct, seen.via_prom

    # two queries a poll whatever the fleet's size; the slow-changing info at the start (and
    # again, with the pair once more, should a finished reason show up for the first time)
    assert seen.queries[0] == 3
    assert sorted(seen.queries)[len(seen.queries) // 2] == 2
    assert max(seen.queries) <= 5
    d, v = by_name(direct), by_name(via_prom)
    assert set(d) == set(v) == {u.removeprefix("http://") for u in sims}
    hot_name = sims[0].removeprefix("http://")
    for name in d:
        a, b = d[name], v[name]
        assert a.up
        assert b.up
        assert a.model == b.model == "llmtop-sim"
        assert a.kv_capacity_tokens == b.kv_capacity_tokens == 8192
        for field, rel in (("decode_tok_per_s", 0.3), ("prompt_tok_per_s", 0.5)):
            x, y = getattr(a, field), getattr(b, field)
            assert close(x, y, rel), (name, field, x, y)
        assert a.ttft_p95_s is not None or name == hot_name  # a light replica has first tokens
        assert close(a.ttft_p95_s, b.ttft_p95_s, 0.5, 0.05), (name, a.ttft_p95_s, b.ttft_p95_s)
        assert close(a.itl_p95_s, b.itl_p95_s, 0.5, 0.01), (name, a.itl_p95_s, b.itl_p95_s)
        # gauges: Prometheus's value is its last scrape's, so one of the direct readings of
        # the polls it can be from must match it (the hot replica's KV swings 0.2 in a second)
        seen_direct = [by_name(f)[name] for f in seen.recent_direct]
        gauges = (("running", 0.5, 3), ("waiting", 0.5, 4), ("kv_cache_usage_frac", 0.0, 0.1))
        for field, rel, abs_ in gauges:
            y = getattr(b, field)
            xs = [getattr(e, field) for e in seen_direct]
            assert any(close(x, y, rel, abs_) for x in xs), (name, field, xs, y)
        for field in ("mean_prompt_tokens", "mean_generation_tokens"):  # fixed by the load
            assert close(getattr(a, field), getattr(b, field), 0.05), (name, field, a, b)
        if name != hot_name:  # the hot one schedules a request every ~10 s: a window's edge
            # decides whether it holds one, so only the light replicas' phases are compared
            for field in ("queue_time_p95_s", "prefill_time_mean_s"):
                x, y = getattr(a, field), getattr(b, field)
                assert close(x, y, 0.5, 0.05), (name, field, x, y)
    pod_of = {f"127.0.0.1:{u.rsplit(':', 1)[1]}": f"sim-{u.rsplit(':', 1)[1]}" for u in sims}
    p = by_name(seen.by_pod)
    assert set(p) == set(pod_of.values())  # one row per value of --replica-label
    for name, pod in pod_of.items():
        a, b = v[name], p[pod]
        assert (b.up, b.model, b.kv_capacity_tokens) == (a.up, a.model, a.kv_capacity_tokens)
        assert close(a.decode_tok_per_s, b.decode_tok_per_s, 0.3), (name, a, b)
    for fleet, top in ((direct, hot_name), (via_prom, hot_name), (seen.by_pod, pod_of[hot_name])):
        outlier = [f for f in fleet.findings if f.id == "replica-outlier"]
        assert outlier, fleet.findings
        assert outlier[0].summary.startswith(f"{top} stands out"), outlier[0].summary
        assert fleet.replicas[0].name == top

    # the recording replays through today's rules to what the live run showed, poll by poll
    recording = read_recording(seen.recording)
    assert recording.header["targets"]["prometheus"] == prom_url
    replayed = ReplaySource(recording, HealthSettings()).snapshots()
    assert len(replayed) == len(seen.live) == 20
    for live, again in zip(seen.live, replayed, strict=True):
        assert again.time == live.time
        assert again.findings == live.findings
        assert again.engines == live.engines
        assert isinstance(again, FleetSnapshot)
        assert isinstance(live, FleetSnapshot)
        assert again.fleet is not None
        assert live.fleet is not None
        assert again.fleet.replicas == live.fleet.replicas
    report = build_report(str(seen.recording), HealthSettings())
    assert report.polls == 20
    assert "replica-outlier" in {f.id for f in report.findings}


FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "metrics-load.txt"
ENGINE_1 = {
    "vllm:num_requests_running": "2.0",
    "vllm:num_requests_waiting": "0.0",
    "vllm:num_requests_waiting_by_reason": "0.0",
    "vllm:kv_cache_usage_perc": "0.25",
}


def data_parallel_exposition() -> bytes:
    """The real vLLM 0.32 capture as a server of two engines: engine 1 is a copy of engine 0
    with gauges of its own and three times its KV blocks (counters still, so rates are 0)."""
    out = []
    for line in FIXTURE.read_text().splitlines():
        out.append(line)
        if line.startswith("#") or 'engine="0"' not in line:
            continue
        copy = line.replace('engine="0"', 'engine="1"').replace(
            'gpu_blocks="32"', 'gpu_blocks="96"'
        )
        value = ENGINE_1.get(copy.split("{", 1)[0])
        out.append(copy if value is None else copy.rsplit(" ", 1)[0] + " " + value)
    return ("\n".join(out) + "\n").encode()


@pytest.fixture
def dp_server() -> Iterator[str]:
    """A data-parallel vLLM's /metrics on loopback (host:port)."""
    body = data_parallel_exposition()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("content-type", "text/plain; version=0.0.4")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def read_both(target: str, prom_url: str) -> tuple[Fleet, Fleet, list[int]]:
    """Three polls a second apart: the target scraped directly, and read through Prometheus."""
    monitor = MonitorSettings(vllm_urls=(f"http://{target}",), gateway_url=None, nvml=False)
    direct = FleetCollector(monitor, HealthSettings(), window_s=WINDOW_S, timeout_s=2.0)
    prom = PrometheusSource(prom_url, selector='{job="vllm"}', window_s=WINDOW_S, timeout_s=5.0)
    pipeline = FleetPipeline(HealthSettings(), window_s=WINDOW_S)
    queries = []
    try:
        for _ in range(3):
            sent = prom.queries_sent
            await direct.poll()
            pipeline.update(RawPoll(time=time.time()), await prom.read())
            queries.append(prom.queries_sent - sent)
            await asyncio.sleep(1.0)
    finally:
        await direct.aclose()
        await prom.aclose()
    assert direct.fleet is not None
    assert pipeline.fleet is not None
    return direct.fleet, pipeline.fleet, queries


def test_a_data_parallel_server_reads_as_when_scraped(
    tmp_path: Path, procs: list[subprocess.Popen[str]], dp_server: str
) -> None:
    prom_url = start_prometheus(find_prometheus(), [dp_server], tmp_path, procs)
    wait_scraped(prom_url, 3, 30)  # the counters stand still: rates are 0 both ways

    direct, via_prom, queries = asyncio.run(read_both(dp_server, prom_url))

    assert queries[1:] == [4, 4]  # the replicas' pair of queries, then its engines'
    d, v = by_name(direct), by_name(via_prom)
    assert set(d) == set(v) == {dp_server, f"{dp_server}#0", f"{dp_server}#1"}
    server = v[dp_server]
    assert (server.running, server.waiting) == (6, 42)
    assert server.kv_cache_usage_frac == pytest.approx((1.0 * 32 + 0.25 * 96) / 128)  # by blocks
    assert server.kv_capacity_tokens == 128 * 128
    assert v[f"{dp_server}#1"].kv_capacity_tokens == 96 * 128
    fields = (
        "up",
        "model",
        "running",
        "waiting",
        "waiting_capacity",
        "kv_cache_usage_frac",
        "kv_capacity_tokens",
        "decode_tok_per_s",
        "mean_prompt_tokens",
        "mean_generation_tokens",
        "prefix_cache_hit_frac",
    )
    for name in d:
        for field in fields:
            a, b = getattr(d[name], field), getattr(v[name], field)
            assert a == pytest.approx(b), (name, field, a, b)
