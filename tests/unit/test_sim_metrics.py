"""The sim's /metrics has vLLM 0.32's families, types, label names and buckets (diffed against
the real capture), and its values follow the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmtop.sim.dcgm import DcgmTelemetry
from llmtop.sim.metrics import MetricsRenderer
from llmtop.sim.model import Engine, EngineConfig
from llmtop.sim.profiles import get_profile

# What llmtop reads (the list); each must match the real capture exactly.
READ_BY_LLMTOP = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
    "vllm:request_success",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:admission_rejections",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total",
)

Shape = tuple[str, tuple[str, ...], tuple[str, ...]]


def shapes(text: str) -> dict[str, Shape]:
    """vllm family -> (type, label names, bucket bounds)."""
    out: dict[str, Shape] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        labels: set[str] = set()
        bounds: list[str] = []
        for s in fam.samples:
            labels |= set(s.labels)
            if s.name.endswith("_bucket") and s.labels["le"] not in bounds:
                bounds.append(s.labels["le"])
        if fam.name == "vllm:cache_config_info":
            labels = {"block_size", "engine", "kv_cache_size_tokens", "num_gpu_blocks"} & labels
        out[fam.name] = (fam.type, tuple(sorted(labels)), tuple(bounds))
    return out


def sample_names(text: str) -> list[str]:
    return [line.split("{", 1)[0] for line in text.splitlines() if line.startswith("vllm:")]


def values(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            extra = ",".join(
                f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("engine", "model_name")
            )
            out[f"{s.name}{{{extra}}}"] = s.value
    return out


@pytest.fixture
def loaded() -> Engine:
    """The fast profile (max_model_len 2048, like the capture) after some load and an abort."""
    engine = Engine(EngineConfig.from_profile(get_profile("fast")))
    seqs = [engine.add_request(600, 150) for _ in range(10)]
    for _ in range(250):
        engine.step()
    engine.abort(seqs[-1])
    return engine


def test_families_match_the_real_vllm_capture(loaded: Engine, fixtures_dir: Path) -> None:
    real = (fixtures_dir / "metrics-load.txt").read_text()
    sim = MetricsRenderer(loaded, "tinyllm", 1.7e9).render()
    real_shapes, sim_shapes = shapes(real), shapes(sim)
    for name in READ_BY_LLMTOP:
        assert name in real_shapes, name
        assert sim_shapes.get(name) == real_shapes[name], name
    # Every other vLLM family too, in the same order, sample by sample.
    assert sim_shapes == real_shapes
    assert sample_names(sim) == sample_names(real)


def test_saved_sim_captures_match_the_real_ones(fixtures_dir: Path) -> None:
    for kind in ("idle", "load"):
        real = shapes((fixtures_dir / f"metrics-{kind}.txt").read_text())
        sim = shapes((fixtures_dir / f"sim-metrics-{kind}.txt").read_text())
        assert set(sim) == set(real)
        for name in READ_BY_LLMTOP:
            # Token-count buckets follow max_model_len (seed: 8192, the capture: 2048).
            assert sim[name][:2] == real[name][:2], name
    load = values((fixtures_dir / "sim-metrics-load.txt").read_text())
    assert load["vllm:num_requests_waiting{}"] > 0
    assert load["vllm:num_preemptions_total{}"] > 0
    assert 0.5 < load["vllm:kv_cache_usage_perc{}"] <= 1.0


def test_values_follow_the_engine(loaded: Engine) -> None:
    m = values(MetricsRenderer(loaded, "m", 1.7e9).render())
    st = loaded.stats
    assert m["vllm:num_requests_running{}"] == len(loaded.running)
    assert m["vllm:num_requests_waiting{}"] == len(loaded.waiting)
    assert m["vllm:num_requests_waiting_by_reason{reason=capacity}"] == len(loaded.waiting)
    assert m["vllm:kv_cache_usage_perc{}"] == pytest.approx(loaded.kv_cache_usage)
    assert 0.0 <= m["vllm:kv_cache_usage_perc{}"] <= 1.0
    assert m["vllm:num_preemptions_total{}"] == st.num_preemptions > 0
    assert m["vllm:prompt_tokens_total{}"] == st.prompt_tokens
    assert m["vllm:generation_tokens_total{}"] == st.generation_tokens
    assert m["vllm:request_success_total{finished_reason=abort}"] == 1
    assert m["vllm:time_to_first_token_seconds_count{}"] == st.ttft.count
    assert m["vllm:time_to_first_token_seconds_bucket{le=+Inf}"] == st.ttft.count
    assert m["vllm:inter_token_latency_seconds_sum{}"] == pytest.approx(st.itl.total)
    assert m["vllm:iteration_tokens_total_count{}"] == st.steps
    info = (
        next(
            f
            for f in text_string_to_metric_families(MetricsRenderer(loaded, "m", 0).render())
            if f.name == "vllm:cache_config_info"
        )
        .samples[0]
        .labels
    )
    assert info["engine"] == "0"
    assert int(info["block_size"]) * int(info["num_gpu_blocks"]) == int(
        info["kv_cache_size_tokens"]
    )
    assert int(info["kv_cache_size_tokens"]) == loaded.config.kv_tokens == 4096


def test_histogram_buckets_are_cumulative(loaded: Engine) -> None:
    text = MetricsRenderer(loaded, "m", 0).render()
    for fam in text_string_to_metric_families(text):
        if fam.type != "histogram":
            continue
        counts = [s.value for s in fam.samples if s.name.endswith("_bucket")]
        assert counts == sorted(counts), fam.name


def test_dcgm_reads_memory_bound_decode_and_compute_bound_prefill() -> None:
    engine = Engine(EngineConfig.from_profile(get_profile("seed")))
    dcgm = DcgmTelemetry(engine, 0.0)

    def scrape(at: float) -> dict[str, float]:
        text = dcgm.render(at)
        return {f.name: f.samples[0].value for f in text_string_to_metric_families(text)}

    idle = scrape(2.0)
    assert idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle["DCGM_FI_DEV_FB_USED"] + idle["DCGM_FI_DEV_FB_FREE"] == 20 * 1024
    for _ in range(8):
        engine.add_request(4000, 400)
    t = engine.now
    while engine.now < t + 1.5:
        engine.step()
    prefill = scrape(engine.now)
    t = engine.now
    while engine.now < t + 3.0:  # 8 sequences decoding: memory-bound
        engine.step()
    decode = scrape(engine.now)
    assert prefill["DCGM_FI_DEV_GPU_UTIL"] >= 95
    assert decode["DCGM_FI_DEV_GPU_UTIL"] >= 95
    assert decode["DCGM_FI_DEV_MEM_COPY_UTIL"] > 50
    assert decode["DCGM_FI_DEV_MEM_COPY_UTIL"] > prefill["DCGM_FI_DEV_MEM_COPY_UTIL"]
    assert decode["DCGM_FI_DEV_POWER_USAGE"] > idle["DCGM_FI_DEV_POWER_USAGE"]
    assert decode["DCGM_FI_DEV_POWER_USAGE"] <= decode["DCGM_FI_DEV_POWER_MGMT_LIMIT"]
    assert decode["DCGM_FI_DEV_GPU_TEMP"] > idle["DCGM_FI_DEV_GPU_TEMP"]
    assert decode["DCGM_FI_DEV_SM_CLOCK"] > idle["DCGM_FI_DEV_SM_CLOCK"]
