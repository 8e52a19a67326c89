"""llmtop reads a real vLLM correctly during a burst, checked against the raw /metrics.

The collector's HTTP transport is teed, so the oracle recomputes running, waiting, KV usage, the
token rates and the TTFT quantile from exactly the bodies llmtop parsed, with prometheus_client
and a PromQL-style quantile written independently in vllm_client.py. A second test runs the
`llmtop snapshot` command itself during a burst, brackets its figures by raw scrapes, and checks
that its verdict holds on the figures it printed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from llmtop.core.base.snapshot import Snapshot
from llmtop.sources.collector import Collector
from tests.support.vllm_client import (
    Metrics,
    TeeTransport,
    bucket_deltas,
    burst,
    p95,
    quantile,
    scrape,
)

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

N, PROMPT, OUTPUT = 24, 600, 300
"""24 requests of 600 + 300 tokens: 8 KV blocks each, 4 fit in the 32 blocks, 8 may run."""

TTFT = "vllm:time_to_first_token_seconds"


async def _until(pred: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.25)


async def test_collector_matches_raw_metrics_during_a_burst(
    idle_vllm: str, make_collector: Callable[..., Collector]
) -> None:
    url = idle_vllm
    tee = TeeTransport()
    collector = make_collector(url, tee)
    polls: list[tuple[float, Metrics]] = []  # (poll time, the exact text llmtop parsed)
    snaps: list[Snapshot] = []

    async def poll() -> None:
        snap = await collector.poll()
        assert collector.last_raw is not None
        polls.append((collector.last_raw.time, Metrics(tee.metrics[-1][1])))
        snaps.append(snap)

    await poll()  # idle: the baseline of every counter
    load = asyncio.ensure_future(burst(url, N, PROMPT, OUTPUT, seed=1))
    try:
        await _until(lambda: (scrape(url).value("vllm:num_requests_waiting") or 0) > 0, 60)
        saw_queue = False
        deadline = time.monotonic() + 240
        while not load.done() and time.monotonic() < deadline:
            await poll()
            t, m = polls[-1]
            e = snaps[-1].engines[0]
            # Gauges: the very values of the scrape.
            assert e.up
            assert e.error is None
            assert e.running == m.need("vllm:num_requests_running")
            assert e.waiting == m.need("vllm:num_requests_waiting")
            assert e.kv_cache_usage_frac == pytest.approx(m.need("vllm:kv_cache_usage_perc"))
            saw_queue = saw_queue or (e.waiting or 0) > 0
            # Rates and quantiles: first poll -> this poll, recomputed from the raw texts.
            t0, m0 = polls[0]
            dt = t - t0
            for field, name in (
                ("decode_tok_per_s", "vllm:generation_tokens_total"),
                ("prompt_tok_per_s", "vllm:prompt_tokens_total"),
                ("preemptions_per_s", "vllm:num_preemptions_total"),
            ):
                want = (m.need(name) - m0.need(name)) / dt
                assert getattr(e, field) == pytest.approx(want, rel=1e-9, abs=1e-9), field
            want_p95 = quantile(0.95, bucket_deltas(m0, m, TTFT))
            if want_p95 is not None and want_p95 > 0.001:
                assert e.ttft_p95_s == pytest.approx(want_p95, rel=1e-9)
            await asyncio.sleep(2.0)
        results = await load
    finally:
        if not load.done():
            load.cancel()
    assert saw_queue, "the burst never queued inside vLLM: too small for this server"
    ok = [r for r in results if r.error is None and r.status == 200]
    assert len(ok) == N, [r.error for r in results if r.error]
    assert all(r.output_tokens == OUTPUT for r in ok)

    # After the burst: llmtop's TTFT p95 over the whole burst against the clients' own p95.
    # Poll until the burst's tokens are all counted (bounded: they must be, exactly).
    gen = "vllm:generation_tokens_total"
    for _ in range(20):
        await poll()
        if polls[-1][1].need(gen) - polls[0][1].need(gen) >= N * OUTPUT:
            break
        await asyncio.sleep(0.5)
    e = snaps[-1].engines[0]
    (_, m0), (_, m1) = polls[0], polls[-1]
    assert m1.need(gen) - m0.need(gen) == N * OUTPUT
    assert m1.need(TTFT + "_count") - m0.need(TTFT + "_count") == N
    client_p95 = p95([r.ttft_s for r in ok if r.ttft_s is not None])
    assert e.ttft_p95_s is not None
    bounds = sorted(m1.buckets(TTFT))
    # Same histogram bucket, or the next one (interpolation inside a bucket is a guess).
    width = next(le for le in bounds if le >= client_p95) - max(
        [0.0] + [le for le in bounds if le < client_p95]
    )
    assert abs(e.ttft_p95_s - client_p95) <= width, (e.ttft_p95_s, client_p95)
    assert e.kv_capacity_tokens == int(m1.cache_config()["num_gpu_blocks"]) * int(
        m1.cache_config()["block_size"]
    )


def _snapshot_cli(url: str, window_s: float) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtop",
            "snapshot",
            "--vllm",
            url,
            "--gateway",
            "off",
            "--window-s",
            str(window_s),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


async def test_snapshot_command_during_a_burst(idle_vllm: str) -> None:
    url = idle_vllm
    load = asyncio.ensure_future(burst(url, N, PROMPT, OUTPUT, seed=2))
    try:
        await _until(lambda: (scrape(url).value("vllm:num_requests_waiting") or 0) > 0, 60)
        before = scrape(url)
        code, out = await asyncio.to_thread(_snapshot_cli, url, 4.0)
        after = scrape(url)
    finally:
        results = await load
    assert all(r.error is None for r in results)
    engine = out["engines"][0]
    assert engine["up"] is True
    # Gauges move: llmtop's reading lies within what the raw endpoint showed around it.
    assert 0 < engine["running"] <= 8
    assert engine["kv_cache_usage_frac"] is not None
    assert 0.0 <= engine["kv_cache_usage_frac"] <= 1.0
    assert engine["kv_capacity_tokens"] == 4096
    # Rates: the snapshot's window lies inside [before, after], so it cannot exceed the
    # rate over a much shorter span by much; check it against the surrounding rate loosely.
    outer = (
        after.need("vllm:generation_tokens_total") - before.need("vllm:generation_tokens_total")
    ) / (after.time - before.time)
    assert engine["decode_tok_per_s"] == pytest.approx(outer, rel=0.5)
    assert code in (1, 2), out  # degraded or critical: a burst this size overloads the server
    # The verdict agrees with the figures it printed: findings are the last poll's, whose
    # figures these are, and kv-exhausted reads the KV peak over the window (printed with the
    # poll it was seen at) and the requests waiting for capacity (vLLM >= 0.20) or waiting.
    assert out["window"]["polls"] >= 2
    assert all(f["last_s"] == out["window"]["span_s"] for f in out["findings"]), out
    peak = engine["kv_cache_usage_peak_frac"]
    assert peak >= engine["kv_cache_usage_frac"]
    assert 0.0 <= engine["kv_cache_usage_peak_s"] <= out["window"]["span_s"]
    waiting = (
        engine["waiting_capacity"] if engine["waiting_capacity"] is not None else engine["waiting"]
    )
    pressed = peak >= 0.9 and (waiting > 0 or (engine["preemptions_per_s"] or 0) > 0)
    ids = {f["id"] for f in out["findings"]}
    assert ("kv-exhausted" in ids) == pressed, out
