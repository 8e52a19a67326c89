"""A real Prometheus scraping three `llmtop sim`s on loopback: llmtop's PromQL source gives the
per-replica figures llmtop computes scraping the same sims directly, and names the same outlier.

The binary is found on PATH (Debian's `prometheus` package), or installed by
.ci/install-system-tools; otherwise the test is skipped, saying why. Bounded: ~60 s.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmtop.core.fleet import Fleet, FleetPipeline
from llmtop.core.raw import RawPoll
from llmtop.core.snapshot import EngineStats
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.fleet import FleetCollector
from llmtop.sources.prometheus import PrometheusSource
from tests.system_tools import system_binary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
WINDOW_S = 10.0


def find_prometheus() -> str:
    """The prometheus binary, installed when missing (tests/system_tools.py); else skip."""
    return system_binary("prometheus")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(proc)
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.terminate()
    for p in started:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()


def wait_ready(url: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready within {deadline_s} s")


def by_name(fleet: Fleet) -> dict[str, EngineStats]:
    return {r.name: r.stats for r in fleet.replicas}


def close(a: float | None, b: float | None, rel: float, abs_: float = 0.0) -> bool:
    """Both unknown (no first token in the window, say), or within rel (or abs_) of each other."""
    if a is None and b is None:
        return True
    return a is not None and b is not None and abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


async def watch(sims: list[str], prom_url: str) -> tuple[Fleet, Fleet, list[int]]:
    """Poll both ways once a second for ~20 s; the last fleets and the queries per poll."""
    monitor = MonitorSettings(vllm_urls=tuple(sims), gateway_url=None, nvml=False)
    direct = FleetCollector(monitor, HealthSettings(), window_s=WINDOW_S, timeout_s=2.0)
    prom = PrometheusSource(prom_url, selector='{job="vllm"}', window_s=WINDOW_S, timeout_s=5.0)
    pipeline = FleetPipeline(HealthSettings(), window_s=WINDOW_S)
    queries = []
    try:
        for _ in range(20):
            start = time.monotonic()
            sent = prom.queries_sent
            await direct.poll()
            derived = await prom.read()
            queries.append(prom.queries_sent - sent)
            pipeline.update(RawPoll(time=time.time(), engines=()), derived)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    finally:
        await direct.aclose()
        await prom.aclose()
    assert direct.fleet is not None
    assert pipeline.fleet is not None
    return direct.fleet, pipeline.fleet, queries


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
        load = ["--url", url, "--duration", "50", "--requests", "5000", *shape]
        start([sys.executable, "-m", "llmtop", "load", *load], procs)
    port = free_port()
    targets = ", ".join(f"'{u.removeprefix('http://')}'" for u in sims)
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{targets}]\n"
    )
    start(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        procs,
    )
    prom_url = f"http://127.0.0.1:{port}"
    wait_ready(prom_url + "/-/ready", 30)
    time.sleep(WINDOW_S)  # let Prometheus fill one window

    direct, via_prom, queries = asyncio.run(watch(sims, prom_url))

    assert max(queries) <= 4  # a handful per poll, whatever the fleet's size
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
        assert close(a.running, b.running, 0.5, 3), (name, a.running, b.running)
        assert close(a.waiting, b.waiting, 0.5, 4), (name, a.waiting, b.waiting)
    for fleet in (direct, via_prom):
        outlier = [f for f in fleet.findings if f.id == "replica-outlier"]
        assert outlier, fleet.findings
        assert outlier[0].summary.startswith(f"{hot_name} stands out"), outlier[0].summary
        assert fleet.replicas[0].name == hot_name
