"""The engine keeps vLLM V1's scheduling rules and its block accounting."""

from __future__ import annotations

import dataclasses

import pytest

from harness.sim_virtual import run_concurrent
from llmtop.errors import UsageError
from llmtop.sim.model import FINISHED, RUNNING, WAITING, Engine, EngineConfig, RequestRejected
from llmtop.sim.profiles import PROFILES, get_profile


def engine(**overrides: int) -> Engine:
    return Engine(EngineConfig.from_profile(get_profile("fast"), **overrides))


def held_blocks(e: Engine) -> int:
    return sum(s.num_blocks for s in (*e.running, *e.waiting))


def test_prompt_longer_than_max_model_len_is_a_400() -> None:
    e = engine(max_model_len=1024)
    with pytest.raises(RequestRejected) as info:
        e.add_request(1025, 1)
    assert info.value.status == 400
    assert "maximum context length is 1024" in info.value.message
    with pytest.raises(RequestRejected, match="max_tokens"):
        e.add_request(1000, 100)
    assert not e.has_work()


def test_max_tokens_defaults_to_the_rest_of_the_context() -> None:
    e = engine(max_model_len=512)
    seq = e.add_request(500)
    while e.has_work():
        e.step()
    assert seq.num_output == 12
    assert seq.finish_reason == "length"


def test_chunked_prefill_respects_the_token_budget() -> None:
    e = engine(max_num_batched_tokens=256, max_num_seqs=8)
    seq = e.add_request(1000, 4)
    steps = 0
    while seq.first_token_s < 0:
        result = e.step()
        assert result.num_tokens <= 256
        steps += 1
    assert steps == 4  # ceil(1000 / 256)
    assert seq.num_blocks == 1000 // 16 + 1


def test_decodes_are_scheduled_before_new_prefills() -> None:
    e = engine(max_num_batched_tokens=64, max_num_seqs=8)
    first = e.add_request(32, 50)
    e.step()
    assert first.num_output == 1
    second = e.add_request(1000, 5)
    e.step()
    assert first.num_output == 2  # the decode went first
    assert second.num_computed == 63  # the rest of the budget


def test_max_num_seqs_caps_the_running_batch() -> None:
    e = engine(max_num_seqs=4)
    seqs = [e.add_request(16, 8) for _ in range(10)]
    e.step()
    assert len(e.running) == 4
    assert len(e.waiting) == 6
    while e.has_work():
        e.step()
        assert len(e.running) <= 4
    assert all(s.status == FINISHED for s in seqs)


def test_kv_exhaustion_preempts_the_newest_and_recomputes_it() -> None:
    e = engine()  # 4,096 KV tokens = 256 blocks
    seqs = [e.add_request(500, 400) for _ in range(8)]
    preempted_order = []
    while e.has_work():
        result = e.step()
        preempted_order.extend(result.preempted)
        assert 0 <= e.free_blocks <= e.config.num_gpu_blocks
        assert held_blocks(e) + e.free_blocks == e.config.num_gpu_blocks
        for victim in result.preempted:
            assert victim.status == WAITING
            assert victim.num_blocks == 0
            assert e.waiting[0].num_preemptions >= 1
    assert preempted_order, "8 x 900 tokens must overflow 4,096"
    # The victim is always the most recently admitted: the last request to arrive goes first.
    assert preempted_order[0] is seqs[-1]
    assert all(s.num_output == 400 and s.finish_reason == "length" for s in seqs)
    st = e.stats
    assert st.num_preemptions == len(preempted_order)
    assert st.prompt_tokens == 8 * 500  # counted once, recompute not included
    assert st.generation_tokens == 8 * 400
    assert st.finished["length"] == 8
    assert e.free_blocks == e.config.num_gpu_blocks


def test_abort_frees_blocks_and_counts_abort() -> None:
    e = engine()
    a = e.add_request(600, 100)
    b = e.add_request(600, 100)
    e.step()
    assert a.status == RUNNING
    assert a.num_blocks > 0
    e.abort(a)
    e.abort(b)
    e.abort(a)  # twice is harmless
    assert e.free_blocks == e.config.num_gpu_blocks
    assert e.stats.finished["abort"] == 2
    assert not e.has_work()


def test_queued_request_limit_rejects_with_503() -> None:
    e = engine(max_num_queued_reqs=2)
    e.add_request(10, 1)
    e.add_request(10, 1)
    with pytest.raises(RequestRejected) as info:
        e.add_request(10, 1)
    assert info.value.status == 503
    assert e.stats.admission_rejections == 1


def test_ttft_and_itl_histograms_follow_the_clock() -> None:
    e = engine()
    seq = e.add_request(100, 20)
    while e.has_work():
        e.step()
    st = e.stats
    assert st.ttft.count == 1
    assert st.ttft.total == pytest.approx(seq.first_token_s - seq.arrival_s)
    assert st.itl.count == 19
    assert st.itl.total == pytest.approx(seq.finished_s - seq.first_token_s)
    assert st.e2e.count == 1
    assert st.iteration_tokens.count == st.steps


def test_decode_is_memory_bound_and_prefill_compute_bound() -> None:
    e = Engine(EngineConfig.from_profile(get_profile("seed")))
    e.add_request(2048, 2)
    e.step()
    assert e.last_compute_s > e.last_memory_s
    e.step()
    assert e.last_memory_s > e.last_compute_s


def test_profiles_size_their_kv_cache_from_memory() -> None:
    h100 = get_profile("h100-8b")
    tokens = h100.derived_kv_tokens()
    assert tokens % 16 == 0
    assert 300_000 < tokens < 600_000
    assert EngineConfig.from_profile(h100, kv_tokens=10_000).kv_tokens == 10_000 - 10_000 % 16
    with pytest.raises(UsageError, match="known: fast, h100-8b, seed"):
        get_profile("nope")
    small = dataclasses.replace(PROFILES["seed"], gpu_memory_bytes=14 * 1024**3)
    assert small.derived_kv_tokens() == 0


def test_explicit_max_model_len_must_fit_the_cache() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        EngineConfig.from_profile(get_profile("fast"), max_model_len=8192)
    assert EngineConfig.from_profile(get_profile("seed"), kv_tokens=1024).max_model_len == 1024
    with pytest.raises(ValueError, match="at least max_num_seqs"):
        EngineConfig.from_profile(get_profile("fast"), max_num_batched_tokens=64)


def test_closed_loop_keeps_the_stream_count() -> None:
    e = engine()
    steps = run_concurrent(e, 16, 64, 32, 5.0)
    assert steps > 0
    assert e.now >= 5.0
    assert len(e.running) + len(e.waiting) == 16
