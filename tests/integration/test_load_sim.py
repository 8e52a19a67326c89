"""The load generator against the simulated engine and the gateway: its figures agree with what
the engine itself exports on /metrics, and the gateway's 429s are seen and honoured."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.derive.percentiles import percentile_linear
from llmtop.load.drivers import ClosedLoop
from llmtop.load.runner import Runner, Shape
from llmtop.load.stats import Slo, summarize


def ttft_buckets(text: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of vllm:time_to_first_token_seconds, summed over labels."""
    acc: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "vllm:time_to_first_token_seconds":
            continue
        for s in family.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                acc[le] = acc.get(le, 0.0) + s.value
    return sorted(acc.items())


def bucket_index(buckets: list[tuple[float, float]], value: float) -> int:
    """Index of the bucket (lower, upper] holding `value`."""
    for i, (le, _) in enumerate(buckets):
        if value <= le:
            return i
    return len(buckets) - 1


async def test_client_ttft_agrees_with_the_engine_histogram(
    start_sim: Callable[..., ServerThread],
) -> None:
    sim = start_sim(profile="fast", max_num_seqs=4)
    n = 32
    async with Runner(sim.url, max_requests=n, max_connections=8) as runner:
        await runner.resolve_model()
        # 8 in flight against 4 seats: half of them queue, so TTFT is more than one step.
        await asyncio.wait_for(
            ClosedLoop(runner, Shape(prompt_tokens=(200, 600), output_tokens=24), 8).wait(), 60
        )
    s = summarize(runner.results, runner.elapsed(), Slo())
    assert s.ok == n
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{sim.url}/metrics")).text
    buckets = ttft_buckets(text)
    total = buckets[-1][1]
    assert total == n  # the engine saw every request the client counted
    # The engine's p50 bucket: the first whose cumulative count reaches half.
    engine_p50 = next(i for i, (_, c) in enumerate(buckets) if c >= total / 2)
    client_ttfts = [r.ttft_s for r in runner.results if r.ttft_s is not None]
    client_p50 = percentile_linear(client_ttfts, 50)
    assert client_p50 is not None
    assert abs(bucket_index(buckets, client_p50) - engine_p50) <= 1, (client_p50, buckets)
    # Token counts agree exactly.
    gen = sum(
        smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
        if smp.name == "vllm:generation_tokens_total"
    )
    assert gen == s.output_tokens == n * 24
    assert s.prompt_tokens == sum(r.prompt_tokens for r in runner.results)
    assert not math.isnan(s.ttft.p95 or math.nan)


async def test_gateway_429s_are_counted_and_retry_after_honoured(
    start_sim: Callable[..., ServerThread], start_gateway: Callable[..., ServerThread]
) -> None:
    sim = start_sim(profile="fast")
    # Before any completion the gateway says "come back in queue_timeout_s": keep it short.
    gw = start_gateway(sim.url, max_concurrency=1, max_queue=1, queue_timeout_s=2.0)
    async with Runner(gw.url, max_requests=6, max_connections=6, retry_429=True) as runner:
        await runner.resolve_model()
        await asyncio.wait_for(
            ClosedLoop(runner, Shape(prompt_tokens=(50, 50), output_tokens=16), 6).wait(), 60
        )
    s = summarize(runner.results, runner.elapsed(), Slo(ttft_s=None, itl_s=None))
    assert s.rejections_429 > 0
    assert s.retry_after_given == s.rejections_429  # the gateway always says when to come back
    assert s.retry_after_honoured > 0
    assert "queue_full" in {r.reject_reason for r in runner.results if r.rejections}
    assert s.ok + s.rejected == 6
