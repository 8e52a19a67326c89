"""Health rules as data: each names the binding resource, the measured numbers and the fix.

A rule is a pure check over a `Context` (this poll's stats, recent snapshots, settings) that
returns a `Verdict` when its condition holds. `HealthState` adds hysteresis: a condition must
hold `fire_after_s` before its finding fires (immediate rules, such as target-down, fire at
once) and must stay false `clear_after_s` before the finding clears, so a finding does not
flap on one noisy window. A rule whose inputs are unknown (None) does not hold; the pipeline
separately reports status "unknown" when the core inputs are missing, so unknown never reads
as healthy. Actions name the right fix: for backlog and KV exhaustion, cap concurrency at the
gateway (never raise --max-num-seqs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llmtop.core import format as fmt
from llmtop.core.snapshot import (
    Bottleneck,
    EngineStats,
    Finding,
    GatewayStats,
    GpuStats,
    Severity,
    Snapshot,
)
from llmtop.settings import HealthSettings

THROTTLE_THERMAL = frozenset({"sw_thermal", "hw_thermal", "hw_slowdown"})
THROTTLE_POWER = frozenset({"sw_power_cap", "hw_power_brake"})


@dataclass(frozen=True)
class Context:
    """What the rules see at one poll."""

    time: float
    engines: tuple[EngineStats, ...]
    gateway: GatewayStats | None
    gpus: tuple[GpuStats, ...]
    settings: HealthSettings
    history: Sequence[Snapshot] = ()
    """Earlier snapshots, oldest first (the pipeline keeps ~10 minutes)."""
    last_progress: dict[str, float] = field(default_factory=dict)
    """Engine URL -> last time its token counters moved."""
    max_num_seqs: int | None = None


@dataclass(frozen=True)
class Verdict:
    """A rule that holds: the evidence and the fix, with optional overrides of the rule's class."""

    summary: str
    action: str
    severity: Severity | None = None
    bottleneck: Bottleneck | None = None


@dataclass(frozen=True)
class Rule:
    """One health rule: an id, its default class, and a pure check."""

    id: str
    severity: Severity
    bottleneck: Bottleneck
    check: Callable[[Context], Verdict | None]
    immediate: bool = False
    """Fire and clear without hysteresis (the fact itself is not noisy: a target is down)."""


def _up(ctx: Context) -> list[EngineStats]:
    return [e for e in ctx.engines if e.up and not e.stats_disabled]


def _where(ctx: Context, e: EngineStats) -> str:
    return f"{e.url}: " if len(ctx.engines) > 1 else ""


def _kv_fit(e: EngineStats) -> int | None:
    """Sequences that fit in the KV cache at the mean request size (capacity / tokens per req)."""
    if e.kv_capacity_tokens is None or e.mean_prompt_tokens is None:
        return None
    per_req = e.mean_prompt_tokens + (e.mean_generation_tokens or 0.0)
    if per_req <= 0:
        return None
    return max(1, math.floor(e.kv_capacity_tokens / per_req))


def _cap_action(n: int | None, why: str) -> str:
    if n is None:
        return (
            f"{why}: cap concurrency at the gateway (press - or :cap N, gateway max_concurrency) "
            "so the excess waits there with a timeout, or restart vLLM with a lower --max-num-seqs"
        )
    return (
        f"{why}: cap concurrency at ~{n}: press - or :cap {n} (gateway max_concurrency), "
        f"or restart vLLM with --max-num-seqs {n}"
    )


def _kv_peak(ctx: Context, e: EngineStats) -> float | None:
    """Highest KV usage over the window: preemption frees blocks, so a full cache oscillates."""
    values = [e.kv_cache_usage_frac]
    for i, snap in enumerate(reversed(ctx.history)):
        # The window, and at least the previous poll (its start when polls are a window apart).
        if i > 0 and snap.time < ctx.time - ctx.settings.window_s:
            break
        values += [p.kv_cache_usage_frac for p in snap.engines if p.url == e.url and p.up]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _kv_pressed(ctx: Context, e: EngineStats) -> bool:
    """KV at its high mark within the window, with preemptions or requests waiting."""
    peak = _kv_peak(ctx, e)
    if peak is None or peak < ctx.settings.kv_high_frac:
        return False
    if e.preemptions_per_s:
        return True
    waiting = e.waiting_capacity if e.waiting_capacity is not None else e.waiting
    return bool(waiting)


def target_down(ctx: Context) -> Verdict | None:
    down = [e for e in ctx.engines if not e.up]
    if not down:
        return None
    what = "; ".join(e.error or f"{e.url}: no answer" for e in down)
    return Verdict(
        f"vLLM not answering: {what}",
        "check the vLLM process and its log (still loading the model? crashed? wrong port?)",
    )


def stats_disabled(ctx: Context) -> Verdict | None:
    off = [e.url for e in ctx.engines if e.up and e.stats_disabled]
    if not off:
        return None
    return Verdict(
        f"{', '.join(off)} answers but exports no vllm:* metrics: llmtop cannot see its load",
        "restart vLLM without --disable-log-stats (its /metrics then carries the vllm:* series)",
    )


def degraded_200(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in _up(ctx):
        ttft_over = e.ttft_p95_s is not None and e.ttft_p95_s > s.ttft_slo_s
        itl_over = e.itl_p95_s is not None and e.itl_p95_s > s.itl_slo_s
        if not (ttft_over or itl_over):
            continue
        done = sum(e.finished_per_s.values())
        errors = e.finished_per_s.get("error", 0.0)
        if done > 0 and errors / done > s.error_rate_max:
            continue  # failing, not "200 OK but degraded"
        parts = []
        if ttft_over:
            parts.append(f"TTFT p95 {fmt.seconds(e.ttft_p95_s)} (SLO {fmt.seconds(s.ttft_slo_s)})")
        if itl_over:
            parts.append(f"ITL p95 {fmt.seconds(e.itl_p95_s)} (SLO {fmt.seconds(s.itl_slo_s)})")
        worst = max((e.ttft_p95_s or 0.0) / s.ttft_slo_s, (e.itl_p95_s or 0.0) / s.itl_slo_s)
        severity: Severity = "critical" if worst >= s.critical_slo_factor else "warning"
        load = f"{fmt.count(e.running)} running, {fmt.count(e.waiting)} waiting"
        summary = f"{_where(ctx, e)}{', '.join(parts)} with ~0 errors; {load}"
        bottleneck: Bottleneck
        queue_share = (
            e.queue_time_mean_s / e.ttft_mean_s
            if e.queue_time_mean_s is not None and e.ttft_mean_s
            else None
        )
        if _kv_pressed(ctx, e):
            bottleneck = "kv"
            action = _cap_action(_kv_fit(e), "KV cache is full")
        elif ttft_over and (
            (queue_share is not None and queue_share >= 0.5) or (e.waiting or 0) > 0
        ):
            bottleneck = "queue"
            n = max(1, int(e.running)) if e.running else None
            action = _cap_action(n, "requests queue inside vLLM")
        elif itl_over and not ttft_over:
            bottleneck = "decode"
            n = max(1, math.floor((e.decode_tok_per_s or 0.0) * s.itl_slo_s)) or None
            action = _cap_action(n, "too many sequences share each decode step")
        else:
            bottleneck = "prefill"
            action = (
                "prompts are expensive: cap in-flight prompt tokens at the gateway "
                "(max_inflight_prompt_tokens), enable prefix caching, or add capacity"
            )
        return Verdict(summary, action, severity=severity, bottleneck=bottleneck)
    return None


def kv_exhausted(ctx: Context) -> Verdict | None:
    for e in _up(ctx):
        if not _kv_pressed(ctx, e):
            continue
        waiting = e.waiting_capacity if e.waiting_capacity is not None else e.waiting
        n = _kv_fit(e)
        arithmetic = ""
        if n is None and e.running:
            n = max(1, int(e.running))  # no request finished yet: what fits is what runs
            arithmetic = f"; the cache holds the {n} running now"
        elif n is not None and e.mean_prompt_tokens is not None:
            per_req = e.mean_prompt_tokens + (e.mean_generation_tokens or 0.0)
            arithmetic = (
                f"; {fmt.count(e.kv_capacity_tokens)} KV tokens / {fmt.count(per_req)} tokens "
                f"per request ({fmt.count(e.mean_prompt_tokens)} prompt + "
                f"{fmt.count(e.mean_generation_tokens)} output) = {n} sequences fit"
            )
        summary = (
            f"{_where(ctx, e)}KV cache {fmt.frac(_kv_peak(ctx, e))} full, "
            f"{fmt.per_s(e.preemptions_per_s, ' preemptions/s')}, {fmt.count(waiting)} waiting for "
            f"capacity, {fmt.count(e.running)} running{arithmetic}"
        )
        return Verdict(summary, _cap_action(n, "more sequences than the KV cache holds"))
    return None


def _past(ctx: Context, url: str, ago_s: float) -> tuple[float, EngineStats] | None:
    """The engine's stats from the snapshot closest to `ago_s` before now (at least half)."""
    best: tuple[float, EngineStats] | None = None
    for snap in reversed(ctx.history):
        dt = ctx.time - snap.time
        if dt < ago_s / 2:
            continue
        if best is not None and dt - ago_s > abs(best[0] - ago_s):
            break  # only further from `ago_s` from here on
        for e in snap.engines:
            if e.url == url and e.up and (best is None or abs(dt - ago_s) < abs(best[0] - ago_s)):
                best = (dt, e)
    return best


def batching_cliff(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in _up(ctx):
        past = _past(ctx, e.url, s.window_s)
        if past is None or e.waiting is None or e.decode_tok_per_s is None:
            continue
        dt, then = past
        if then.waiting is None or not then.decode_tok_per_s:
            continue
        grew = e.waiting - then.waiting
        flat = (
            abs(e.decode_tok_per_s - then.decode_tok_per_s)
            <= s.cliff_flat_frac * then.decode_tok_per_s
        )
        if grew < s.cliff_waiting_growth or not flat:
            continue
        limit = ""
        if ctx.max_num_seqs is not None and e.running is not None and e.running >= ctx.max_num_seqs:
            limit = f" (vLLM --max-num-seqs {ctx.max_num_seqs} reached)"
        summary = (
            f"{_where(ctx, e)}waiting {fmt.count(then.waiting)} -> {fmt.count(e.waiting)} in "
            f"{dt:.0f} s while decode stays at {fmt.tok_per_s(e.decode_tok_per_s)} with "
            f"{fmt.count(e.running)} running{limit}: more load only adds queueing"
        )
        n = max(1, int(e.running)) if e.running else None
        return Verdict(
            summary, _cap_action(n, "the engine is at its batch limit; queue in the gateway")
        )
    return None


def decode_bound(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in _up(ctx):
        if not e.running or e.decode_tok_per_s_per_seq is None or e.decode_tok_per_s is None:
            continue
        best: EngineStats | None = None
        for snap in ctx.history:
            for p in snap.engines:
                if (
                    p.url == e.url
                    and p.running
                    and p.decode_tok_per_s_per_seq is not None
                    and p.running * 2 <= e.running
                    and (
                        best is None
                        or p.decode_tok_per_s_per_seq > (best.decode_tok_per_s_per_seq or 0)
                    )
                ):
                    best = p
        if best is None or best.decode_tok_per_s_per_seq is None:
            continue
        if e.decode_tok_per_s_per_seq > s.decode_collapse_frac * best.decode_tok_per_s_per_seq:
            continue
        itl_over = e.itl_p95_s is not None and e.itl_p95_s > s.itl_slo_s
        if not itl_over and e.decode_tok_per_s_per_seq * s.itl_slo_s >= 1.0:
            continue  # slower per sequence, as batching always is, but within the ITL SLO
        n = max(1, math.floor(e.decode_tok_per_s * s.itl_slo_s))
        summary = (
            f"{_where(ctx, e)}each sequence decodes at {fmt.tok_per_s(e.decode_tok_per_s_per_seq)} "
            f"with {fmt.count(e.running)} running, down from "
            f"{fmt.tok_per_s(best.decode_tok_per_s_per_seq)} at {fmt.count(best.running)} "
            f"({fmt.tok_per_s(e.decode_tok_per_s)} aggregate): decode steps are memory-bound"
        )
        why = (
            f"to keep ITL under {fmt.seconds(s.itl_slo_s)} at "
            f"{fmt.tok_per_s(e.decode_tok_per_s)} aggregate"
        )
        return Verdict(summary, _cap_action(n, why))
    return None


def prefill_bound(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in _up(ctx):
        if e.ttft_p95_s is None or e.ttft_p95_s <= s.ttft_slo_s:
            continue
        if e.prefill_time_mean_s is None or not e.ttft_mean_s:
            continue
        share = e.prefill_time_mean_s / e.ttft_mean_s
        if share < s.prefill_dominant_frac:
            continue
        summary = (
            f"{_where(ctx, e)}prefill is {fmt.frac(min(share, 1.0))} of TTFT (mean "
            f"{fmt.seconds(e.prefill_time_mean_s)} of {fmt.seconds(e.ttft_mean_s)}; TTFT p95 "
            f"{fmt.seconds(e.ttft_p95_s)}) at {fmt.tok_per_s(e.prompt_tok_per_s)} prompt, mean "
            f"prompt {fmt.count(e.mean_prompt_tokens)} tokens"
        )
        action = (
            "long prompts bind: cap in-flight prompt tokens at the gateway "
            "(max_inflight_prompt_tokens), enable prefix caching for shared prefixes, or lower "
            "--max-num-batched-tokens so chunked prefill interleaves with decode"
        )
        return Verdict(summary, action)
    return None


def stale_data(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in _up(ctx):
        last = ctx.last_progress.get(e.url)
        if not e.running or last is None or ctx.time - last < s.stale_after_s:
            continue
        summary = (
            f"{_where(ctx, e)}{fmt.count(e.running)} running but no token generated for "
            f"{ctx.time - last:.0f} s: the engine is hung or its metrics are stale"
        )
        return Verdict(
            summary,
            "check the vLLM log for a stuck step or a dead engine core; restart it if hung",
        )
    return None


def vllm_admission(ctx: Context) -> Verdict | None:
    for e in _up(ctx):
        if not e.admission_rejections_per_s:
            continue
        return Verdict(
            f"{_where(ctx, e)}vLLM rejects {fmt.per_s(e.admission_rejections_per_s)} requests "
            "itself (--max-num-queued-reqs/-tokens)",
            "queue in the llmtop gateway instead (priorities, timeouts, live limits), "
            "or raise vLLM's --max-num-queued-reqs",
        )
    return None


def gateway_down(ctx: Context) -> Verdict | None:
    g = ctx.gateway
    if g is None or g.up:
        return None
    return Verdict(
        f"llmtop gateway at {g.url} not answering: {g.error or 'no answer'}",
        "start it (llmtop gateway --upstream <vLLM URL>) or pass --gateway off",
    )


def gateway_saturated(ctx: Context) -> Verdict | None:
    g, s = ctx.gateway, ctx.settings
    if g is None or not g.up:
        return None
    near = (
        g.queued is not None and g.max_queue and g.queued >= s.gateway_queue_near_frac * g.max_queue
    )
    rejected = sum(g.rejected_per_s.values())
    slow = g.queue_wait_p95_s is not None and g.queue_wait_p95_s > s.queue_wait_slo_s
    if not (near or rejected > 0 or slow):
        return None
    reasons = ", ".join(f"{k} {fmt.per_s(v)}" for k, v in sorted(g.rejected_per_s.items()) if v)
    summary = (
        f"gateway queue {fmt.count(g.queued)}/{fmt.count(g.max_queue)}, "
        f"{fmt.per_s(rejected)} 429s{f' ({reasons})' if reasons else ''}, queue wait p95 "
        f"{fmt.seconds(g.queue_wait_p95_s)} (SLO {fmt.seconds(s.queue_wait_slo_s)}), "
        f"{fmt.count(g.in_flight)}/{fmt.count(g.max_concurrency)} in flight"
    )
    engines = _up(ctx)
    headroom = bool(engines) and all(
        e.kv_cache_usage_frac is not None
        and e.kv_cache_usage_frac < s.kv_high_frac
        and e.waiting == 0
        and not e.preemptions_per_s
        for e in engines
    )
    if headroom:
        e = engines[0]
        action = (
            f"the engine has headroom (KV {fmt.frac(e.kv_cache_usage_frac)}, 0 waiting): raise "
            "max_concurrency a step (press +) and watch TTFT"
        )
    else:
        action = (
            "the engine is full, so the 429s protect it: add capacity (replicas/GPUs) or "
            "lower the offered load (rate limit); raising max_concurrency would only move the queue"
        )
    return Verdict(summary, action, severity="critical" if rejected > 0 else "warning")


def gateway_paused(ctx: Context) -> Verdict | None:
    g = ctx.gateway
    if g is None or not g.up or not g.paused:
        return None
    return Verdict(
        f"gateway admission is paused: {fmt.count(g.queued)} queued, none admitted",
        "resume admission (press p or :resume) when the engine is ready",
    )


def gpu_throttled(ctx: Context) -> Verdict | None:
    for gpu in ctx.gpus:
        reasons = set(gpu.throttle_reasons)
        thermal, power = reasons & THROTTLE_THERMAL, reasons & THROTTLE_POWER
        if not (thermal or power):
            continue
        summary = (
            f"GPU {gpu.index} throttled ({', '.join(sorted(thermal | power))}) at "
            f"{fmt.celsius(gpu.temp_c)}, {fmt.watts(gpu.power_w)}/{fmt.watts(gpu.power_limit_w)}, "
            f"SM clock {fmt.mhz(gpu.sm_clock_mhz)}"
        )
        action = (
            "check cooling and airflow (nvidia-smi -q -d TEMPERATURE,PERFORMANCE); tokens/s "
            "stay lower until it clears"
            if thermal
            else "the GPU is at its power limit (nvidia-smi -q -d POWER); expect lower clocks "
            "under load, or raise the limit if the hardware allows"
        )
        return Verdict(summary, action)
    return None


def gpu_memory_full(ctx: Context) -> Verdict | None:
    for gpu in ctx.gpus:
        if gpu.mem_used_bytes is None or not gpu.mem_total_bytes:
            continue
        used = gpu.mem_used_bytes / gpu.mem_total_bytes
        if used < ctx.settings.gpu_mem_high_frac:
            continue
        others = f"; processes: {', '.join(gpu.processes)}" if gpu.processes else ""
        return Verdict(
            f"GPU {gpu.index} memory {fmt.frac(used)} used ({fmt.gib(gpu.mem_used_bytes)} of "
            f"{fmt.gib(gpu.mem_total_bytes)}){others}",
            "out-of-memory risk: stop other processes on the GPU or restart vLLM with a lower "
            "--gpu-memory-utilization",
        )
    return None


RULES: tuple[Rule, ...] = (
    Rule("target-down", "critical", "target", target_down, immediate=True),
    Rule("stats-disabled", "warning", "target", stats_disabled, immediate=True),
    Rule("stale-data", "critical", "target", stale_data),
    Rule("kv-exhausted", "critical", "kv", kv_exhausted),
    Rule("degraded-200", "warning", "queue", degraded_200),
    Rule("batching-cliff", "warning", "queue", batching_cliff),
    Rule("decode-bound", "warning", "decode", decode_bound),
    Rule("prefill-bound", "warning", "prefill", prefill_bound),
    Rule("vllm-admission-rejecting", "warning", "queue", vllm_admission),
    Rule("gateway-saturated", "warning", "gateway", gateway_saturated),
    Rule("gateway-paused", "warning", "gateway", gateway_paused, immediate=True),
    Rule("gateway-down", "warning", "gateway", gateway_down, immediate=True),
    Rule("gpu-throttled", "warning", "gpu", gpu_throttled),
    Rule("gpu-memory-full", "warning", "gpu", gpu_memory_full),
)


@dataclass
class _RuleState:
    pending_since: float | None = None
    fired_since: float | None = None
    false_since: float | None = None
    verdict: Verdict | None = None


class HealthState:
    """Evaluates the rules with hysteresis; one per pipeline."""

    def __init__(self, settings: HealthSettings, rules: Sequence[Rule] = RULES) -> None:
        self.settings = settings
        self.rules = tuple(rules)
        self._state: dict[str, _RuleState] = {r.id: _RuleState() for r in self.rules}

    def evaluate(self, ctx: Context) -> tuple[Finding, ...]:
        """The findings active at `ctx.time`, most severe first."""
        s = self.settings
        t = ctx.time
        out: list[Finding] = []
        for rule in self.rules:
            st = self._state[rule.id]
            verdict = rule.check(ctx)
            if verdict is not None:
                st.verdict, st.false_since = verdict, None
                if st.fired_since is None:
                    if st.pending_since is None:
                        st.pending_since = t
                    if rule.immediate or t - st.pending_since >= s.fire_after_s:
                        st.fired_since = t
            else:
                st.pending_since = None
                if st.fired_since is not None:
                    if st.false_since is None:
                        st.false_since = t
                    if rule.immediate or t - st.false_since >= s.clear_after_s:
                        st.fired_since = st.false_since = None
            if st.fired_since is not None and st.verdict is not None:
                v = st.verdict
                out.append(
                    Finding(
                        id=rule.id,
                        severity=v.severity or rule.severity,
                        bottleneck=v.bottleneck or rule.bottleneck,
                        summary=v.summary,
                        action=v.action,
                        since=st.fired_since,
                    )
                )
        out.sort(key=lambda f: 0 if f.severity == "critical" else 1)
        return tuple(out)
