"""Scripted snapshots of one incident, for screenshots, snapshot tests and the CPU benchmark.

The story follows the reference figures (a 20 GB GPU, ~38,800 KV tokens, ~34 tok/s for one
request): healthy, then a batching cliff at 64 concurrent, then KV exhaustion under 4,000-token
prompts (TTFT toward 55 s with 0 errors), then the fix: the gateway capped at 8, the excess
queued in the gateway and TTFT back under its SLO. Times are fixed so renders are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

from llmtop.core.snapshot import EngineStats, Finding, GatewayStats, GpuStats, Snapshot

T0 = 1_764_439_200.0
"""2025-11-29 18:00:00 UTC: the first scripted poll."""
URL = "http://10.0.0.7:8000"
GATEWAY_URL = "http://10.0.0.7:9000"
MODEL = "Qwen/Qwen2.5-7B-Instruct"
KV_TOKENS = 38_800
GIB = 2**30

PHASES = ("healthy", "batching-cliff", "kv-exhausted", "after-cap")
PHASE_S = 60
"""Seconds each phase lasts in the story."""


def _lerp(a: float, b: float, k: float) -> float:
    return a + (b - a) * min(max(k, 0.0), 1.0)


def _engine(**kw: object) -> EngineStats:
    base: dict[str, object] = {
        "url": URL,
        "up": True,
        "model": MODEL,
        "version": "0.32.0",
        "kv_capacity_tokens": KV_TOKENS,
        "kv_block_size": 16,
        "finished_per_s": {"stop": 1.2, "length": 0.3},
        "prefix_cache_hit_frac": 0.12,
    }
    base.update(kw)
    return EngineStats(**base)  # type: ignore[arg-type]


def _gateway(**kw: object) -> GatewayStats:
    base: dict[str, object] = {
        "url": GATEWAY_URL,
        "up": True,
        "in_flight": 6,
        "queued": 0,
        "max_concurrency": 64,
        "max_queue": 128,
        "queue_timeout_s": 30.0,
        "rate_limit_rpm": None,
        "paused": False,
        "queue_wait_p50_s": 0.0,
        "queue_wait_p95_s": 0.0,
        "upstream_healthy": True,
    }
    base.update(kw)
    return GatewayStats(**base)  # type: ignore[arg-type]


def _gpu(util: float, bw: float, power: float, temp: float, mem_frac: float = 0.93) -> GpuStats:
    return GpuStats(
        index=0,
        name="NVIDIA RTX 4000 Ada (20GB)",
        util_frac=util,
        mem_bw_util_frac=bw,
        mem_used_bytes=int(20 * GIB * mem_frac),
        mem_total_bytes=20 * GIB,
        power_w=power,
        power_limit_w=130.0,
        temp_c=temp,
        sm_clock_mhz=2175.0,
    )


def _finding(fid: str, sev: str, neck: str, summary: str, action: str, since: float) -> Finding:
    return Finding(fid, sev, neck, summary, action, since)  # type: ignore[arg-type]


def _healthy(t: float, k: float) -> Snapshot:
    run = round(_lerp(4, 7, k))
    return Snapshot(
        time=t,
        engines=(
            _engine(
                running=run,
                waiting=0,
                waiting_capacity=0,
                kv_cache_usage_frac=0.05 * run,
                prompt_tok_per_s=410 + 30 * run,
                decode_tok_per_s=33.5 * run,
                decode_tok_per_s_per_seq=33.5,
                preemptions_per_s=0.0,
                mean_prompt_tokens=820,
                mean_generation_tokens=310,
                ttft_p50_s=0.18,
                ttft_p95_s=0.42,
                ttft_p99_s=0.61,
                itl_p50_s=0.029,
                itl_p95_s=0.033,
                itl_p99_s=0.041,
                e2e_p95_s=10.4,
                queue_time_p50_s=0.002,
                queue_time_p95_s=0.01,
            ),
        ),
        gateway=_gateway(in_flight=run, ttft_p95_s=0.45),
        gpus=(_gpu(0.62, 0.48, 88, 61),),
        status="ok",
    )


def _cliff(t: float, k: float, t_fire: float) -> Snapshot:
    run = round(_lerp(8, 64, k * 3))
    ttft = _lerp(0.5, 12.4, k * 2)
    fired = k > 0.25
    return Snapshot(
        time=t,
        engines=(
            _engine(
                running=run,
                waiting=0,
                waiting_capacity=0,
                kv_cache_usage_frac=_lerp(0.4, 0.86, k * 3),
                prompt_tok_per_s=_lerp(700, 1650, k * 3),
                decode_tok_per_s=_lerp(250, 1041, k * 3),
                decode_tok_per_s_per_seq=_lerp(31, 16.3, k * 3),
                preemptions_per_s=0.0,
                mean_prompt_tokens=820,
                mean_generation_tokens=310,
                ttft_p50_s=ttft * 0.55,
                ttft_p95_s=ttft,
                ttft_p99_s=ttft * 1.3,
                itl_p50_s=0.052,
                itl_p95_s=_lerp(0.035, 0.061, k * 3),
                itl_p99_s=0.09,
                e2e_p95_s=31.0,
                queue_time_p50_s=ttft * 0.4,
                queue_time_p95_s=ttft * 0.8,
            ),
        ),
        gateway=_gateway(in_flight=run, ttft_p95_s=ttft + 0.05),
        gpus=(_gpu(0.97, 0.91, 128, 74),),
        findings=(
            _finding(
                "batching-cliff",
                "critical",
                "decode",
                f"{run} running: decode {_lerp(31, 16.3, k * 3):.0f} tok/s per seq, TTFT p95 "
                f"{ttft:.1f}s > SLO 2s; aggregate flat at ~1.0k tok/s",
                "cap concurrency near the knee: press - or `:cap 8`",
                t_fire,
            ),
            _finding(
                "degraded-200",
                "warning",
                "queue",
                f"0 errors but TTFT p95 {ttft:.1f}s is {ttft / 2:.0f}x the SLO",
                "users are waiting while error alerts stay green: see batching-cliff",
                t_fire + 2,
            ),
        )
        if fired
        else (),
        status="critical" if fired else "degraded",
    )


def _kv(t: float, k: float, t_fire: float) -> Snapshot:
    ttft = _lerp(14, 55, k * 1.5)
    waiting = round(_lerp(4, 23, k * 3))
    return Snapshot(
        time=t,
        engines=(
            _engine(
                running=32 - waiting,
                waiting=waiting,
                waiting_capacity=waiting,
                kv_cache_usage_frac=_lerp(0.9, 0.99, k * 3),
                prompt_tok_per_s=_lerp(1650, 2900, k),
                decode_tok_per_s=_lerp(900, 290, k * 2),
                decode_tok_per_s_per_seq=_lerp(20, 32, k),
                preemptions_per_s=_lerp(0.2, 1.8, k * 3),
                mean_prompt_tokens=4000,
                mean_generation_tokens=256,
                ttft_p50_s=ttft * 0.6,
                ttft_p95_s=ttft,
                ttft_p99_s=ttft * 1.1,
                itl_p50_s=0.031,
                itl_p95_s=0.12,
                itl_p99_s=0.31,
                e2e_p95_s=ttft + 8,
                queue_time_p50_s=ttft * 0.5,
                queue_time_p95_s=ttft * 0.85,
            ),
        ),
        gateway=_gateway(in_flight=32, ttft_p95_s=ttft + 0.1),
        gpus=(_gpu(0.99, 0.74, 129, 79, 0.95),),
        findings=(
            _finding(
                "kv-exhausted",
                "critical",
                "kv",
                f"KV cache 99% of 38.8k tok, {waiting} waiting for memory, preempting "
                f"{_lerp(0.2, 1.8, k * 3):.1f}/s; only ~9 avg requests fit",
                "cap concurrency at what fits: `:cap 8`",
                t_fire,
            ),
            _finding(
                "degraded-200",
                "warning",
                "queue",
                f"0 errors but TTFT p95 {ttft:.0f}s is {ttft / 2:.0f}x the SLO",
                "users are waiting while error alerts stay green: see kv-exhausted",
                t_fire - 40,
            ),
        ),
        status="critical",
    )


def _after(t: float, k: float, t_fire: float) -> Snapshot:
    ttft = _lerp(30, 1.3, k * 2.5)
    queued = round(_lerp(24, 14, k))
    wait95 = _lerp(3.0, 6.2, k * 2)
    saturated = k > 0.3
    return Snapshot(
        time=t,
        engines=(
            _engine(
                running=8,
                waiting=0,
                waiting_capacity=0,
                kv_cache_usage_frac=0.87,
                prompt_tok_per_s=1480,
                decode_tok_per_s=262,
                decode_tok_per_s_per_seq=32.8,
                preemptions_per_s=_lerp(0.8, 0.0, k * 4),
                mean_prompt_tokens=4000,
                mean_generation_tokens=256,
                ttft_p50_s=ttft * 0.5,
                ttft_p95_s=ttft,
                ttft_p99_s=ttft * 1.4,
                itl_p50_s=0.03,
                itl_p95_s=0.034,
                itl_p99_s=0.05,
                e2e_p95_s=9.7,
                queue_time_p50_s=0.01,
                queue_time_p95_s=_lerp(20, 0.05, k * 3),
            ),
        ),
        gateway=_gateway(
            in_flight=8,
            queued=queued,
            max_concurrency=8,
            queue_wait_p50_s=wait95 * 0.5,
            queue_wait_p95_s=wait95,
            rejected_per_s={"queue_timeout": 0.0},
            ttft_p95_s=ttft + wait95,
        ),
        gpus=(_gpu(0.94, 0.70, 121, 76, 0.95),),
        findings=(
            _finding(
                "gateway-saturated",
                "warning",
                "gateway",
                f"{queued} queued in the gateway, wait p95 {wait95:.1f}s > SLO 5s; engine healthy",
                "the engine is at its safe cap: add capacity, or raise `:timeout` to keep queueing",
                t_fire,
            ),
        )
        if saturated
        else (),
        status="degraded" if saturated else "ok",
    )


def story(seconds_per_phase: int = PHASE_S) -> list[Snapshot]:
    """The whole incident, one snapshot a second."""
    out: list[Snapshot] = []
    makers: list[Callable[[float, float, float], Snapshot]] = [
        lambda t, k, f: _healthy(t, k),
        _cliff,
        _kv,
        _after,
    ]
    for p, make in enumerate(makers):
        start = T0 + p * seconds_per_phase
        fire = start + seconds_per_phase * 0.3
        for i in range(seconds_per_phase):
            out.append(make(start + i, i / seconds_per_phase, fire))
    return out


def upto(phase: str, seconds_per_phase: int = PHASE_S) -> list[Snapshot]:
    """The story from the start to the end of `phase` (what the screen shows at that moment)."""
    end = (PHASES.index(phase) + 1) * seconds_per_phase
    return story(seconds_per_phase)[:end]
