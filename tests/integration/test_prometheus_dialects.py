"""A fleet that mixes engines, through a real Prometheus (issue 44.6): one `llmtop sim` speaking
vLLM and one speaking SGLang (`--dialect sglang`: SGLang's own families, `tp_rank` label and
histogram names), both under load and scraped by one Prometheus as one job.

`llmtop --prometheus` finds which replica speaks which engine, asks each in its own names and
gives each row its engine, with the figures llmtop reads scraping the same sims directly; the
rules `llmtop rules --dialect vllm,sglang` makes, loaded into that Prometheus, record each
engine's figures under its own prefix for its replica alone and evaluate without a failure.

Prometheus is found on PATH or installed by .ci/install-system-tools, else skipped (why said).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.http_ready import wait_ready
from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.base.snapshot import EngineStats
from llmtop.core.output.rulesfile import render
from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.fleet_collector import FleetCollector
from llmtop.sources.prometheus import PrometheusSource
from tests.support.prometheus import (
    close,
    find_prometheus,
    procs,
    start,
    wait_scraped,
)

pytestmark = [
    pytest.mark.slow(35),
    pytest.mark.timeout(240),
    pytest.mark.xdist_group("realtime-load"),
]
__all__ = ["procs"]  # the fixture, used by name
WINDOW_S = 10.0


def start_sim(dialect: str, procs: list[subprocess.Popen[str]]) -> str:
    args = [sys.executable, "-m", "llmtop", "sim", "--port", "0", "--kv-tokens", "8192"]
    proc = start([*args, "--dialect", dialect], procs)
    assert proc.stdout is not None
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
    assert m, f"no banner from llmtop sim --dialect {dialect}"
    wait_ready(m.group(1) + "/metrics", 20)
    return m.group(1)


def start_prometheus(
    binary: str, targets: list[str], rules: Path, tmp: Path, procs: list[subprocess.Popen[str]]
) -> str:
    """One job `vllm` scraping every target each second, evaluating `rules` each second (it
    does not scrape itself: a rule's failure is read from /api/v1/rules)."""
    port = free_port()
    listed = ", ".join(f"'{t}'" for t in targets)
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{rules}']\n"
        f"scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{listed}]\n"
    )
    start(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        procs,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/-/ready", 30)
    return url


def instances(prom: str, query: str) -> dict[str, float]:
    answer = httpx.post(f"{prom}/api/v1/query", data={"query": query}, timeout=5).json()
    return {r["metric"].get("instance", ""): float(r["value"][1]) for r in answer["data"]["result"]}


async def watch(sims: list[str], prom_url: str) -> tuple[list[dict[str, EngineStats]], ...]:
    """Eight polls a second apart, directly and through Prometheus."""
    monitor = MonitorSettings(vllm_urls=tuple(sims), gateway_url=None, nvml=False)
    direct = FleetCollector(monitor, HealthSettings(), window_s=WINDOW_S, timeout_s=2.0)
    prom = PrometheusSource(prom_url, selector='{job="vllm"}', window_s=WINDOW_S, timeout_s=5.0)
    seen_direct, seen_prom = [], []
    try:
        for _ in range(8):
            start_at = time.monotonic()
            await direct.poll()
            assert direct.fleet is not None
            seen_direct.append({r.name: r.stats for r in direct.fleet.replicas})
            seen_prom.append({r.name: r.stats for r in await prom.read()})
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start_at)))
    finally:
        await direct.aclose()
        await prom.aclose()
    return seen_direct, seen_prom


def test_prometheus_reads_a_vllm_and_an_sglang_replica_each_in_its_names(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    binary = find_prometheus()
    sims = {kind: start_sim(kind, procs) for kind in ("vllm", "sglang")}
    for url in sims.values():
        load = ["--url", url, "--duration-s", "40", "--requests", "5000", "--concurrency", "4"]
        start([sys.executable, "-m", "llmtop", "load", *load], procs)
    name = {kind: url.removeprefix("http://") for kind, url in sims.items()}
    rules = tmp_path / "llmtop.rules.yml"
    spec = AlertSpec(vllm_matchers='job="vllm"', interval_s=1.0)
    rules.write_text(render(spec, dialects=["vllm", "sglang"]))
    prom_url = start_prometheus(binary, list(name.values()), rules, tmp_path, procs)
    wait_scraped(prom_url, 3, 30)
    time.sleep(WINDOW_S)  # one window of rates

    direct, via_prom = asyncio.run(watch(list(sims.values()), prom_url))
    last = via_prom[-1]
    assert set(last) == set(name.values())
    for kind, replica in name.items():
        b = last[replica]
        assert b.up, b.error
        assert b.engine == kind  # each row names its engine
        assert b.model == "llmtop-sim"
        assert b.kv_capacity_tokens == 8192  # vLLM's cache_config_info; SGLang's token pool
        a = direct[-1][replica]
        assert a.engine == kind
        for field, rel in (("decode_tok_per_s", 0.4), ("prompt_tok_per_s", 0.6)):
            x, y = getattr(a, field), getattr(b, field)
            assert y is not None, (kind, field)
            assert close(x, y, rel), (kind, field, x, y)
        assert b.ttft_p95_s is not None, kind  # histograms in SGLang's names, by `le`
        assert b.itl_p95_s is not None, kind
        # a gauge is its last scrape's: one of the direct readings of the last polls matches
        runs = [d[replica].running for d in direct[-3:]]
        assert any(close(x, b.running, 0.5, 2) for x in runs), (kind, runs, b.running)
        usage = [d[replica].kv_cache_usage_frac for d in direct[-3:]]
        assert any(close(x, b.kv_cache_usage_frac, 0.0, 0.1) for x in usage), (kind, usage)

    # the rules: each engine's figures under its prefix, for its replica alone, no failure
    for kind, replica in name.items():
        assert set(instances(prom_url, f"llmtop:{kind}_running")) == {replica}, kind
        assert set(instances(prom_url, f"llmtop:{kind}_decode_tok_per_s")) == {replica}, kind
        assert set(instances(prom_url, f"llmtop:{kind}_kv_capacity_tokens")) == {replica}, kind
    groups = httpx.get(f"{prom_url}/api/v1/rules", timeout=5).json()["data"]["groups"]
    assert {g["name"] for g in groups} == {"llmtop", "llmtop-sglang"}
    failed = {
        r["name"]: r.get("lastError") for g in groups for r in g["rules"] if r.get("lastError")
    }
    assert not failed, failed
    assert {r.get("health") for g in groups for r in g["rules"]} == {"ok"}
