"""The field guide's rules on scripted series: each names its class with its numbers, its
severity follows the SLO, and the steady version of each raises nothing."""

from __future__ import annotations

from dataclasses import replace

from llmtop.core.base.snapshot import Finding, GpuStats, LoraAdapters
from tests.support.health import healthy, run


def found(polls: list[tuple[Finding, ...]], finding: str) -> Finding:
    return next(f for f in polls[-1] if f.id == finding)


def never(polls: list[tuple[Finding, ...]], finding: str) -> bool:
    return all(f.id != finding for p in polls for f in p)


def test_prefix_cache_collapse_names_the_cost_and_asks_what_changed() -> None:
    warm = healthy(prefix_cache_hit_frac=0.88, prefix_cache_queried_tok_per_s=4000)
    cold = replace(warm, prefix_cache_hit_frac=0.03)
    polls = run([warm] * 40 + [cold] * 5)
    f = found(polls, "prefix-cache-collapse")
    assert f.bottleneck == "prefill"
    assert f.severity == "info"  # TTFT p95 0.6 s: still inside the SLO
    assert "prefix cache hit rate 88% -> 3% in" in f.summary
    assert "prompt tokens computed per request 8.1x" in f.summary
    assert f.action.startswith("did the system prompt or the routing change?")
    over = run([warm] * 40 + [replace(cold, ttft_p95_s=3.0)] * 5)
    assert found(over, "prefix-cache-collapse").severity == "warning"


def test_a_low_but_steady_prefix_hit_rate_is_not_a_collapse() -> None:
    steady = healthy(prefix_cache_hit_frac=0.04, prefix_cache_queried_tok_per_s=4000)
    assert never(run([steady] * 90), "prefix-cache-collapse")


def test_spec_decode_acceptance_fell() -> None:
    good = healthy(
        spec_acceptance_frac=0.9,
        spec_mean_accepted_len=3.7,
        spec_drafts_per_s=50.0,
        spec_acceptance_by_pos=(0.95, 0.9, 0.85),
    )
    bad = replace(
        good,
        spec_acceptance_frac=0.05,
        spec_mean_accepted_len=1.15,
        spec_acceptance_by_pos=(0.1, 0.04, 0.01),
    )
    polls = run([good] * 30 + [bad] * 5)
    f = found(polls, "spec-decode-low")
    assert f.bottleneck == "decode"
    assert "accepts 5% of draft tokens (was 90%" in f.summary
    assert "1.15 tokens per step for 3 proposed; by position 10%, 4%, 1%" in f.summary
    assert never(run([good] * 90), "spec-decode-low")


def test_lora_adapters_waiting_for_a_slot() -> None:
    waiting = healthy(
        lora=LoraAdapters(max_loras=1, running=("a",), waiting=("b", "c")), waiting_deferred=3
    )
    f = found(run([waiting] * 5), "lora-waiting")
    assert f.bottleneck == "queue"
    assert "LoRA adapters b, c wait for a slot: 1 of 1 slots held by a (--max-loras 1)" in (
        f.summary
    )
    loading = healthy(lora=LoraAdapters(max_loras=2, running=("a",), waiting=("b",)))
    assert never(run([loading] * 10), "lora-waiting")  # a slot is free


def test_lora_reads_vllm_032s_labels_as_it_fills_them() -> None:
    # vLLM 0.32 lists each adapter with a live request under both labels: a wait shows only
    # as deferred requests (tests/fixtures/incidents/real-lora-waiting.jsonl.gz).
    alone = healthy(lora=LoraAdapters(1, running=("a",), waiting=("a",)), waiting_deferred=0)
    assert never(run([alone] * 10), "lora-waiting")
    f = found(run([replace(alone, waiting_deferred=2)] * 5), "lora-waiting")
    assert "requests wait for a LoRA slot (vLLM does not say for which adapter): 1 of 1 " in (
        f.summary
    )


def test_kv_transfer_failures_with_errors_are_a_warning() -> None:
    failing = healthy(kv_transfer_failures_per_s=2.0, kv_transfer_bytes_per_s=4e9)
    f = found(run([failing] * 5), "kv-transfer-failing")
    assert f.severity == "info"  # recomputed locally, TTFT still inside the SLO
    errors = replace(failing, finished_per_s={"stop": 2.0, "error": 0.5})
    assert found(run([errors] * 5), "kv-transfer-failing").severity == "warning"


def test_sleep_health_corruption() -> None:
    idle_asleep = healthy(sleep_state="weights_offloaded", running=0, waiting=0)
    assert found(run([idle_asleep] * 5), "engine-asleep").severity == "info"
    asleep_waiting = replace(idle_asleep, waiting=5)
    assert found(run([asleep_waiting] * 5), "engine-asleep").severity == "critical"
    polls = run([healthy(healthy=False)])
    assert found(polls, "engine-unhealthy").severity == "critical"
    corrupted = found(run([healthy(corrupted_per_s=0.2)] * 5), "requests-corrupted")
    assert "0.2/s requests with NaN logits" in corrupted.summary


def test_decode_stall_while_a_prefill_runs() -> None:
    steady = [healthy(decode_tok_per_s_now=300.0 + (i % 3)) for i in range(40)]
    stall = healthy(decode_tok_per_s_now=40.0, prompt_tok_per_s=6000)
    polls = run([*steady, *[stall] * 5])
    f = found(polls, "decode-stall")
    assert f.bottleneck == "prefill"
    assert f.severity == "info"  # ITL p95 35 ms: a heads-up
    assert "decode 40.0 tok/s now, under a quarter of its running median 301 tok/s" in f.summary
    fewer = replace(stall, running=2)  # fewer sequences decode: not a stall
    assert never(run([*steady, *[fewer] * 5]), "decode-stall")


def test_gpu_xid_and_one_idle_tensor_parallel_gpu() -> None:
    fatal = GpuStats(index=0, util_frac=0.9, xid_last=79)
    polls = run([(healthy(), None, (fatal,))])
    assert found(polls, "gpu-xid-error").severity == "critical"
    minor = GpuStats(index=0, util_frac=0.9, xid_last=13)
    assert found(run([(healthy(), None, (minor,))]), "gpu-xid-error").severity == "info"
    tp = (
        GpuStats(index=0, util_frac=0.95),
        GpuStats(index=1, util_frac=0.02),
        GpuStats(index=2, util_frac=0.93),
        GpuStats(index=3, util_frac=0.96),
    )
    f = found(run([(healthy(), None, tp)] * 5), "tp-gpu-idle")
    assert f.summary.startswith("heads-up: GPU 1 2% busy while 3 others are at 93% or more")
    even = tuple(replace(g, util_frac=0.9) for g in tp)
    assert never(run([(healthy(), None, even)] * 10), "tp-gpu-idle")
