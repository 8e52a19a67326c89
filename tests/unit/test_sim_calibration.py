"""The `seed` profile reproduces the reference figures, in virtual time (see engine docstring)."""

from __future__ import annotations

from harness.sim_virtual import Burst, run_burst
from llmtop.sim.model import Engine, EngineConfig, Sequence
from llmtop.sim.profiles import get_profile


def seed_engine() -> Engine:
    return Engine(EngineConfig.from_profile(get_profile("seed")))


def decode_rate(seq: Sequence) -> float:
    """Tokens per second after the first one, for one request."""
    return (seq.num_output - 1) / (seq.finished_s - seq.first_token_s)


def test_seed_kv_capacity_is_38800_tokens() -> None:
    cfg = EngineConfig.from_profile(get_profile("seed"))
    assert cfg.kv_tokens == 38_800
    assert cfg.num_gpu_blocks == 2_425
    assert 13e9 <= get_profile("seed").weight_bytes <= 15e9


def test_1_single_request_decodes_at_34_tok_s() -> None:
    engine = seed_engine()
    [seq] = run_burst(engine, Burst(1, 512, 256))
    assert seq.num_output == 256
    assert abs(decode_rate(seq) - 34.0) <= 0.10 * 34.0


def test_2_64_concurrent_requests_decode_1041_tok_s_aggregate() -> None:
    engine = seed_engine()
    done = run_burst(engine, Burst(64, 512, 256))
    assert len(done) == 64
    assert all(s.num_output == 256 for s in done)
    makespan = max(s.finished_s for s in done)
    aggregate = sum(s.num_output for s in done) / makespan
    assert abs(aggregate - 1041.0) <= 0.10 * 1041.0
    # The batching win: far more than one stream, far less than 64 of them.
    single = decode_rate(run_burst(seed_engine(), Burst(1, 512, 256))[0])
    assert 20 * single < aggregate < 64 * single


def test_3_32_long_prompts_drive_ttft_toward_55_s_without_errors() -> None:
    engine = seed_engine()
    done = run_burst(engine, Burst(32, 4000, 256))
    assert len(done) == 32
    assert all(s.finish_reason == "length" and s.num_output == 256 for s in done)
    assert engine.stats.num_preemptions > 0
    largest_ttft = max(s.ttft_s or 0.0 for s in done)
    assert abs(largest_ttft - 55.0) <= 0.20 * 55.0


def test_3b_the_same_burst_queues_in_the_engine() -> None:
    engine = seed_engine()
    for _ in range(32):
        engine.add_request(4000, 256)
    peak_waiting = 0
    while engine.has_work():
        engine.step()
        peak_waiting = max(peak_waiting, len(engine.waiting))
    assert peak_waiting > 0
    assert engine.stats.finished["length"] == 32


def test_4_bounded_admission_keeps_engine_ttft_near_one_request() -> None:
    single = run_burst(seed_engine(), Burst(1, 4000, 256))[0].ttft_s
    assert single is not None
    engine = seed_engine()
    done = sorted(
        run_burst(engine, Burst(32, 4000, 256), max_at_engine=8), key=lambda s: s.arrival_s
    )
    assert len(done) == 32
    assert engine.stats.num_preemptions == 0
    assert all(s.num_preemptions == 0 for s in done)
    # Requests let in as a slot frees: each meets an engine that is only decoding.
    later = [s for s in done if s.arrival_s > 0]
    assert len(later) == 24
    for s in later:
        assert s.ttft_s is not None
        assert s.ttft_s <= 1.5 * single
    # The first eight arrive together: FCFS over compute-bound prefill, the k-th waits for
    # the k-1 prompts before it and no more.
    first = sorted((s for s in done if s.arrival_s == 0), key=lambda s: s.first_token_s)
    for k, s in enumerate(first, start=1):
        assert s.ttft_s is not None
        assert s.ttft_s <= 1.5 * k * single
    # Against the unbounded run, the worst engine TTFT collapses.
    unbounded = run_burst(seed_engine(), Burst(32, 4000, 256))
    assert max(s.ttft_s or 0.0 for s in done) < max(s.ttft_s or 0.0 for s in unbounded) / 4
