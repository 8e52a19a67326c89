"""vLLM's metric names across versions, through the parser, the engine map and derive:
0.10.1 on the V0 engine (old names, assembled from vLLM's documented metric names) and 0.32.0
(captured)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import EngineStats
from llmtop.core.exposition import promtext
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.vllm import reader
from llmtop.core.vllm.names import sample_names
from llmtop.settings import HealthSettings

KEEP = promtext.keep_names(sample_names())
URL = "http://127.0.0.1:8000"


def stats(fixtures_dir: Path, idle: str, load: str, span_s: float = 10.0) -> EngineStats:
    """Two polls, `span_s` apart, through the whole pipeline (parser, map, derive, rules)."""
    pipe = Pipeline(HealthSettings())
    for t, name in ((0.0, idle), (span_s, load)):
        samples = promtext.parse((fixtures_dir / name).read_text(), KEEP)
        snap = pipe.update(RawPoll(time=t, engines=(RawEngine(URL, samples),)))
    return snap.engines[0]


def test_vllm_0_10_v0_engine_old_names(fixtures_dir: Path) -> None:
    scrape = reader.extract(
        promtext.parse((fixtures_dir / "metrics-vllm-0.10.1-v0-load.txt").read_text(), KEEP)
    )
    assert scrape.names_used["kv_usage"] == "vllm:gpu_cache_usage_perc"
    assert scrape.names_used["itl"] == "vllm:time_per_output_token_seconds"
    e = stats(fixtures_dir, "metrics-vllm-0.10.1-v0-idle.txt", "metrics-vllm-0.10.1-v0-load.txt")
    assert e.kv_cache_usage_frac == 0.98
    assert e.kv_capacity_tokens == 2622 * 16
    assert (e.running, e.waiting) == (16.0, 9.0)
    assert e.decode_tok_per_s == pytest.approx((10 * 500 + 16 * 250) / 10.0)
    assert e.itl_p50_s is not None
    assert 0.025 < e.itl_p50_s <= 0.05  # 4,000 of 4,990 gaps at 30 ms, the rest at 60 ms
    assert e.ttft_p95_s is not None
    assert e.ttft_p95_s > 7.5
    # what 0.10 does not export stays unknown, never zero
    assert e.waiting_capacity is None
    assert e.waiting_deferred is None
    assert e.prompt_cache_hit_frac is None
    assert e.prefix_cache_hit_frac is None
    assert e.admission_rejections_per_s is None


def test_vllm_0_32_waiting_reasons_and_prompt_sources(fixtures_dir: Path) -> None:
    e = stats(fixtures_dir, "metrics-idle.txt", "metrics-load.txt")
    assert e.waiting_capacity == 42.0
    assert e.waiting_deferred == 0.0
    # prompt_tokens_by_source in the capture: 3,018 computed, 1,792 from the local prefix cache
    assert e.prompt_cache_hit_frac == pytest.approx(1792 / (3018 + 1792))
    assert e.prompt_computed_tok_per_s == pytest.approx(3018 / 10.0)
    assert e.admission_rejections_by_reason_per_s == {
        "max_num_queued_reqs": 0.0,
        "max_num_queued_tokens": 0.0,
    }


def test_deferred_waiting_is_read_apart_from_capacity() -> None:
    text = (
        'vllm:num_requests_waiting{engine="0",model_name="m"} 5\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 2\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3\n'
        'vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="deferred"} 1\n'
    )
    s = reader.extract(promtext.parse(text, KEEP))
    assert (s.waiting_capacity, s.waiting_deferred) == (2.0, 4.0)
