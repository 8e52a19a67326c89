"""health: rules on scripted series (healthy, cliff, KV exhaustion, recovery), hysteresis."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmtop.core.base.snapshot import EngineStats, GatewayStats, GpuStats
from llmtop.core.findings.catalog import HealthState
from llmtop.core.health.rulebase import Context
from tests.support.health import URL, S, healthy, ids, run
from tests.support.kvprinted import printed_fit


def test_healthy_steady_load_fires_nothing() -> None:
    polls = run(healthy(running=8 + (i % 3), waiting=i % 2) for i in range(120))
    assert all(p == () for p in polls)


def test_kv_exhaustion_fires_after_hysteresis_with_the_arithmetic() -> None:
    full = healthy(
        kv_cache_usage_frac=0.97,
        preemptions_per_s=1.5,
        waiting=20,
        waiting_capacity=20,
        mean_prompt_tokens=4000,
        mean_generation_tokens=850,
    )
    polls = run([healthy()] * 5 + [full] * 6)
    assert polls[5] == ()  # just started: not yet
    assert polls[7] == ()
    f = next(f for f in polls[8] if f.id == "kv-exhausted")  # held 3 s
    # TTFT p95 0.6 s is inside the SLO, but 20 wait at 2 finished/s: a new one waits ~10 s
    assert f.severity == "warning"
    assert "20 waiting at 2.0/s finished: a new request waits ~10.0 s for a slot" in f.summary
    assert f.bottleneck == "kv"
    assert f.since == 8.0
    # 90% of 38,800 = 34,920 tokens / (4,000 + 850) = 7 sequences fit (8 would fill 100%)
    assert "34,920 KV tokens (90% target of 38,800) / 4,850 tokens per request" in f.summary
    assert "= 7 sequences fit" in f.summary
    assert printed_fit(f.summary) == (7, 7)
    assert "97%" in f.summary
    assert "1.5 preemptions/s" in f.summary
    assert f.action.startswith("more sequences than the KV cache holds: cap concurrency at ~7")
    assert ":cap 7" in f.action
    assert "--max-num-seqs 7" in f.action


def test_kv_exhaustion_is_critical_only_when_users_miss_the_slo() -> None:
    """The severity policy: the same full cache is info inside the SLO, a warning when the
    TTFT p95 rises toward it (the trend stated), critical once it is over."""
    full = {"kv_cache_usage_frac": 0.99, "preemptions_per_s": 1.0, "waiting": 0}
    inside = run([healthy(**full)] * 6)
    f = next(f for f in inside[-1] if f.id == "kv-exhausted")
    assert f.severity == "info"
    assert f.summary.startswith("heads-up: KV cache 99% full")
    assert "inside the SLO (2.0 s / 100 ms), headroom 3.3x / 2.9x" in f.summary
    missed = run([healthy(**full, ttft_p95_s=3.5)] * 6)
    f = next(f for f in missed[-1] if f.id == "kv-exhausted")
    assert f.severity == "critical"
    assert "TTFT p95 3.5 s, ITL p95 35 ms: over the SLO" in f.summary
    rising = run([healthy(**full, ttft_p95_s=0.2 + 0.1 * i) for i in range(16)])
    f = next(f for f in rising[-1] if f.id == "kv-exhausted")
    assert f.severity == "warning"
    assert "TTFT p95 700 ms -> 1.7 s in 10 s: over its 2.0 s SLO in ~3 s" in f.summary
    unknown = run([healthy(**full, ttft_p95_s=None, itl_p95_s=None)] * 6)
    f = next(f for f in unknown[-1] if f.id == "kv-exhausted")
    assert f.severity == "warning"  # unknown latency never reads as inside the SLO
    assert "TTFT and ITL unknown" in f.summary


def test_kv_high_alone_is_not_exhaustion() -> None:
    polls = run([healthy(kv_cache_usage_frac=0.95)] * 20)
    assert all("kv-exhausted" not in ids(p) for p in polls)


def test_recovery_clears_only_after_clear_delay() -> None:
    full = healthy(kv_cache_usage_frac=0.99, preemptions_per_s=2.0, waiting=9, waiting_capacity=9)
    polls = run([full] * 10 + [healthy()] * 15)
    assert "kv-exhausted" in ids(polls[9])
    assert "kv-exhausted" in ids(polls[15])  # false for 5 s: still shown
    assert "kv-exhausted" not in ids(polls[20])  # false for 10 s: cleared
    assert polls[-1] == ()


def test_flapping_condition_does_not_fire() -> None:
    full = healthy(kv_cache_usage_frac=0.99, preemptions_per_s=2.0, waiting=9)
    polls = run([full, full, healthy()] * 10)
    assert all("kv-exhausted" not in ids(p) for p in polls)


def test_degraded_200_when_slow_without_errors() -> None:
    slow = healthy(ttft_p95_s=39.6, waiting=42, ttft_mean_s=20.0, queue_time_mean_s=19.0)
    polls = run([slow] * 5)
    f = next(f for f in polls[-1] if f.id == "degraded-200")
    assert f.severity == "critical"  # ~20x the SLO
    assert f.bottleneck == "queue"
    assert "TTFT p95 39.6 s (SLO 2.0 s)" in f.summary
    assert "cap concurrency at ~8" in f.action


def test_degraded_200_not_when_erroring() -> None:
    failing = healthy(ttft_p95_s=10.0, finished_per_s={"stop": 1.0, "error": 1.0})
    polls = run([failing] * 5)
    assert "degraded-200" not in ids(polls[-1])


def test_itl_over_slo_points_at_decode() -> None:
    # 128 sequences share 1,040 tok/s: a mean ITL of 123 ms, over the 100 ms SLO by itself
    polls = run([healthy(running=128, itl_p95_s=0.25, decode_tok_per_s=1040)] * 5)
    f = next(f for f in polls[-1] if f.id == "degraded-200")
    assert f.bottleneck == "decode"
    assert f.severity == "warning"
    assert "cap concurrency at ~104" in f.action  # 1,040 tok/s x 0.1 s


def test_itl_tail_with_few_sequences_points_at_prefill_not_a_cap() -> None:
    # 8 sequences share 198 tok/s (a mean ITL of 40 ms) but the p95 is 154 ms: seen in the demo
    # after `:cap 8` with 4,000-token prompts. A cap of ~19 (198 x 0.1) would be a raise
    # offered as "press -"; the slow steps are the ones a prefill chunk shares.
    polls = run([healthy(running=8, itl_p95_s=0.154, decode_tok_per_s=198)] * 5)
    f = next(f for f in polls[-1] if f.id == "degraded-200")
    assert f.bottleneck == "prefill"
    assert "cap concurrency" not in f.action
    assert "max_inflight_prompt_tokens" in f.action
    assert "--max-num-batched-tokens" in f.action


def test_batching_cliff() -> None:
    series = [healthy(running=8, waiting=i * 2, decode_tok_per_s=1000 + (i % 3)) for i in range(20)]
    polls = run(series)
    assert "batching-cliff" not in ids(polls[2])
    f = next(f for f in polls[-1] if f.id == "batching-cliff")
    assert f.bottleneck == "queue"
    assert "while decode stays at 1,00" in f.summary
    assert "cap concurrency at ~8" in f.action


def test_waiting_growing_with_throughput_growing_is_no_cliff() -> None:
    series = [
        healthy(running=8 + i, waiting=i * 2, decode_tok_per_s=300 + 50 * i) for i in range(20)
    ]
    assert all("batching-cliff" not in ids(p) for p in run(series))


def test_decode_bound() -> None:
    # 128 share 1,041 tok/s: 8.1 tok/s each, a mean ITL of 123 ms, over the SLO by itself
    series = [healthy(running=1, decode_tok_per_s=34, decode_tok_per_s_per_seq=34)] * 5
    series += [
        healthy(running=128, decode_tok_per_s=1041, decode_tok_per_s_per_seq=8.1, itl_p95_s=0.15)
    ] * 5
    f = next(f for f in run(series)[-1] if f.id == "decode-bound")
    assert "8.1 tok/s with 128 running, down from 34.0 tok/s at 1" in f.summary
    assert "cap concurrency at ~104" in f.action


def test_decode_bound_not_when_the_mean_itl_fits() -> None:
    # the reference 64 at 1,041 tok/s: 16.3 tok/s each (61 ms mean ITL) with a 150 ms p95 tail;
    # a cap of ~104 would not touch 64 running, so it is not offered
    series = [healthy(running=1, decode_tok_per_s=34, decode_tok_per_s_per_seq=34)] * 5
    series += [
        healthy(running=64, decode_tok_per_s=1041, decode_tok_per_s_per_seq=16.3, itl_p95_s=0.15)
    ] * 5
    last = run(series)[-1]
    assert "decode-bound" not in ids(last)
    f = next(f for f in last if f.id == "degraded-200")
    assert f.bottleneck == "prefill"


def test_cap_advice_says_when_traffic_goes_around_the_gateway() -> None:
    # vLLM runs 8 while the gateway, capped at 3, has none in flight: clients call vLLM directly
    # (what tests/real/test_cliff_real.py does in its direct phase), so no cap there can help
    gw = GatewayStats(url="http://gw", up=True, max_concurrency=3, in_flight=0, queued=0)
    e = healthy(running=8, kv_cache_usage_frac=0.97, preemptions_per_s=0.3, ttft_p95_s=0.5)
    f = next(f for f in run([(e, gw, ())] * 5)[-1] if f.id == "kv-exhausted")
    assert "vLLM runs 8 but the gateway has 0 in flight" in f.action
    # the 8 running hold 97% of the cache (4,705 tokens each): 7 fit in 90% of it, not the
    # mean's 26
    assert "point clients at the gateway (cap ~7)" in f.action
    assert "press -" not in f.action


def test_cap_advice_knows_the_gateway_cap_is_already_set() -> None:
    # right after `:cap 7`, the window still holds the preemptions from before it (8 ran)
    gw = GatewayStats(url="http://gw", up=True, max_concurrency=7, in_flight=7, queued=20)
    e = healthy(running=8, kv_cache_usage_frac=0.97, preemptions_per_s=0.3, ttft_p95_s=0.5)
    f = next(f for f in run([(e, gw, ())] * 5)[-1] if f.id == "kv-exhausted")
    assert "the gateway cap (7) is already at or below ~7" in f.action
    assert "press -" not in f.action
    uncapped = replace(gw, max_concurrency=256)
    f = next(f for f in run([(e, uncapped, ())] * 5)[-1] if f.id == "kv-exhausted")
    assert "press -" in f.action


def test_prefill_bound() -> None:
    e = healthy(ttft_p95_s=5.0, ttft_mean_s=3.0, prefill_time_mean_s=2.4, queue_time_mean_s=0.1)
    f = next(f for f in run([e] * 5)[-1] if f.id == "prefill-bound")
    assert "prefill is 80% of TTFT" in f.summary
    assert "max_inflight_prompt_tokens" in f.action


def test_target_down_is_immediate() -> None:
    polls = run([EngineStats(url=URL, up=False, error="connection refused")])
    assert ids(polls[0]) == ["target-down"]
    assert "connection refused" in polls[0][0].summary


def test_unknown_inputs_fire_nothing_and_read_as_nothing() -> None:
    polls = run([EngineStats(url=URL, up=True)] * 10)
    assert all(p == () for p in polls)


def gateway(**kw: object) -> GatewayStats:
    base = GatewayStats(
        url="http://gw",
        up=True,
        in_flight=8,
        queued=10,
        max_concurrency=8,
        max_queue=128,
        queue_wait_p95_s=1.0,
        rejected_per_s={"queue_full": 0.0},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gw", "severity"),
    [
        ({"queued": 120}, "warning"),
        ({"rejected_per_s": {"queue_full": 3.0}}, "critical"),
        ({"queue_wait_p95_s": 12.0}, "warning"),
    ],
)
def test_gateway_saturated(gw: dict[str, object], severity: str) -> None:
    polls = run([(healthy(), gateway(**gw), ())] * 5)
    f = next(f for f in polls[-1] if f.id == "gateway-saturated")
    assert f.severity == severity
    assert "raise max_concurrency a step" in f.action  # the engine has headroom


def test_gateway_saturated_headroom_is_bounded_by_what_the_kv_cache_holds() -> None:
    # 90% of 38,800 tokens / (1,000 + 300) per request: 26 fit by the mean. Below that a step
    # up is advised, with the bound and its division named; at it, the engine is full by the
    # arithmetic even with the gauge at 20%
    e = healthy(running=8, kv_cache_usage_frac=0.2)  # 970 tokens held each: the mean is larger
    below = run([(e, gateway(queue_wait_p95_s=12.0, max_concurrency=8), ())] * 5)[-1]
    f = next(f for f in below if f.id == "gateway-saturated")
    assert (
        "raise max_concurrency a step with + and watch TTFT "
        "(up to ~26: 34,920 KV tokens (90% target of 38,800) / 1,300 tokens per request, "
        "1,000 prompt + 300 output)"
    ) in f.action
    at = run([(e, gateway(queue_wait_p95_s=12.0, max_concurrency=26), ())] * 5)[-1]
    f = next(f for f in at if f.id == "gateway-saturated")
    assert "the cap (26) is what the KV cache holds at this request size (~26:" in f.action
    above = run([(e, gateway(queue_wait_p95_s=12.0, max_concurrency=30), ())] * 5)[-1]
    f = next(f for f in above if f.id == "gateway-saturated")
    assert "the cap (30) is above what the KV cache holds at this request size (~26:" in f.action
    assert "add capacity" in f.action


def test_gateway_headroom_is_sized_by_what_running_sequences_hold() -> None:
    # Mixed traffic after a cap: the requests that finished in the window were short chats
    # (mean 552 + 256) while the 9 running, long prompts, hold 88% of the cache. The bound is
    # what they hold (3,794 tokens each: 9 fit in 90% of it in 16-token blocks), not the
    # chats' ~43
    e = healthy(
        running=9,
        kv_cache_usage_frac=0.88,
        kv_block_size=16,
        mean_prompt_tokens=552,
        mean_generation_tokens=256,
    )
    polls = run([(e, gateway(queue_wait_p95_s=12.0, max_concurrency=8), ())] * 5)
    f = next(f for f in polls[-1] if f.id == "gateway-saturated")
    assert (
        "(up to ~9: 34,920 KV tokens (90% target of 38,800) / 3,794 tokens per request in "
        "16-token blocks, 88.0% of the cache held by 9 running now)" in f.action
    )
    assert "~43" not in f.action


def test_kv_exhausted_with_mixed_traffic_caps_at_what_the_long_prompts_hold() -> None:
    # The quick demo's case: chats and 1,800-token prompts. The window's finished requests
    # average 1,733 tokens but the 10 running hold 94% of 20,480 tokens, 1,926 each. The
    # exact quotient (10) left a request waiting for blocks at 92-94% KV and never cleared;
    # at the 90% target 9 fit, and the printed figures give 9.
    e = healthy(
        running=10,
        waiting=1,
        waiting_capacity=1,
        kv_cache_usage_frac=0.94,
        kv_capacity_tokens=20_480,
        kv_block_size=16,
        preemptions_per_s=0.4,
        mean_prompt_tokens=1_621,
        mean_generation_tokens=112,
    )
    f = next(f for f in run([e] * 6)[-1] if f.id == "kv-exhausted")
    assert ":cap 9 " in f.action
    assert "18,432 KV tokens (90% target of 20,480) / 1,926 tokens per request" in f.summary
    assert "(94.0% of the cache held by 10 running now)" in f.summary
    assert printed_fit(f.summary) == (9, 9)
    # the target is a setting: at 1.0 the count is the exact quotient, and still recomputable
    exact = replace(S, kv_target_frac=1.0)
    f = next(f for f in run([e] * 6, exact)[-1] if f.id == "kv-exhausted")
    assert "20,480 KV tokens (100% target of 20,480)" in f.summary
    assert printed_fit(f.summary) == (10, 10)
    assert ":cap 10 " in f.action


def test_kv_sizing_remembers_the_long_prompts_for_a_minute() -> None:
    # A wave of long prompts finishes and refills: at the poll after it, KV per running sequence
    # is low (prefills only begun) and the window's mean is the chats'. The most held in the
    # last 60 s still sizes the slot, so the advice does not jump to the chats' figure; older
    # than that, it no longer counts.
    long = healthy(
        running=9,
        kv_cache_usage_frac=0.98,
        kv_block_size=16,
        mean_prompt_tokens=4_000,
        mean_generation_tokens=256,
        waiting=5,
        waiting_capacity=5,
        preemptions_per_s=1.0,
    )
    refill = replace(long, kv_cache_usage_frac=0.93, running=16, mean_prompt_tokens=600)
    polls = run([long] * 4 + [refill] * 30)
    f = next(f for f in polls[20] if f.id == "kv-exhausted")
    # 0.98 x 38,800 / 9 = 4,225 held 17 s before: 34,920 / 4,225 in blocks = 8, not 15 or 40
    assert "= 8 sequences fit" in f.summary
    assert "(98.0% of the cache held by 9 running 17 s ago)" in f.summary
    assert printed_fit(f.summary) == (8, 8)
    late = run([long] * 4 + [refill] * 70)[-1]
    f = next(f for f in late if f.id == "kv-exhausted")
    assert "(93.0% of the cache held by 16 running now)" in f.summary
    assert printed_fit(f.summary) == (15, 15)


def test_kv_exhausted_and_gateway_saturated_name_the_same_size() -> None:
    # One sizing for both rules: while kv-exhausted says N fit, gateway-saturated never
    # advises raising the cap past N, at any cap and any mix
    for usage, running, prompt in ((0.95, 9, 600), (0.97, 16, 4_000), (0.92, 12, 1_500)):
        e = healthy(
            running=running,
            waiting=4,
            waiting_capacity=4,
            kv_cache_usage_frac=usage,
            kv_block_size=16,
            preemptions_per_s=0.5,
            mean_prompt_tokens=prompt,
            mean_generation_tokens=256,
        )
        for cap in (4, 8, 16, 32, 64):
            gw = gateway(queue_wait_p95_s=12.0, max_concurrency=cap, in_flight=cap)
            last = {f.id: f for f in run([(e, gw, ())] * 5)[-1]}
            kv, sat = last["kv-exhausted"], last["gateway-saturated"]
            n = printed_fit(kv.summary)[1]
            assert f"~{n}" in kv.action, (cap, kv.action)
            assert "raise max_concurrency" not in sat.action
            if cap >= n:
                assert f"(~{n}:" in sat.action, (n, sat.action)


def test_gateway_saturated_with_full_engine_says_add_capacity() -> None:
    e = healthy(waiting=30, kv_cache_usage_frac=0.99, preemptions_per_s=1.0)
    polls = run([(e, gateway(queued=127), ())] * 5)
    f = next(f for f in polls[-1] if f.id == "gateway-saturated")
    assert "add capacity" in f.action


def test_gpu_thermal_throttle_and_memory() -> None:
    hot = GpuStats(
        index=0,
        temp_c=91,
        power_w=300,
        power_limit_w=300,
        sm_clock_mhz=1100,
        throttle_reasons=("sw_thermal",),
        mem_used_bytes=79 * 2**30,
        mem_total_bytes=80 * 2**30,
    )
    polls = run([(healthy(), None, (hot,))] * 5)
    found = {f.id: f for f in polls[-1]}
    assert "91 °C" in found["gpu-throttled"].summary
    assert "cooling" in found["gpu-throttled"].action
    assert found["gpu-memory-full"].bottleneck == "gpu"


def test_stale_data() -> None:
    state = HealthState(S)
    ctx = Context(time=100.0, engines=(healthy(),), gateway=None, gpus=(), settings=S)
    assert state.evaluate(replace(ctx, last_progress={URL: 99.0})) == ()
    for t in (120.0, 123.0):
        found = state.evaluate(replace(ctx, time=t, last_progress={URL: 99.0}))
    assert ids(found) == ["stale-data"]


def test_findings_sorted_most_severe_first() -> None:
    hot = GpuStats(index=0, throttle_reasons=("hw_power_brake",))
    full = healthy(kv_cache_usage_frac=0.99, preemptions_per_s=2.0, waiting=9)
    polls = run([(full, None, (hot,))] * 5)
    sev = [f.severity for f in polls[-1]]
    assert sev == sorted(sev, key=lambda s: s != "critical")
    assert {"gpu-throttled", "kv-exhausted"} <= set(ids(polls[-1]))


def test_bigger_batches_within_the_itl_slo_are_not_decode_bound() -> None:
    series = [healthy(running=1, decode_tok_per_s=34, decode_tok_per_s_per_seq=34)] * 5
    series += [healthy(running=64, decode_tok_per_s=1041, decode_tok_per_s_per_seq=16.3)] * 20
    assert all("decode-bound" not in ids(p) for p in run(series))
