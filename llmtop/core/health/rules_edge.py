"""Health rules about what surrounds the engines: the llmtop gateway and the GPUs. Pure."""

from __future__ import annotations

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import GatewayStats, Severity
from llmtop.core.derive.aggregate import combine
from llmtop.core.health.kvsize import KvSize
from llmtop.core.health.rulebase import Context, Verdict, kv_size_now, up_engines
from llmtop.core.health.slo_policy import heads_up, worst_reading

THROTTLE_THERMAL = frozenset({"sw_thermal", "hw_thermal", "hw_slowdown"})
THROTTLE_POWER = frozenset({"sw_power_cap", "hw_power_brake"})


def gateway_down(ctx: Context) -> Verdict | None:
    g = ctx.gateway
    if g is None or g.up:
        return None
    return Verdict(
        f"llmtop gateway at {g.url} not answering: {g.error or 'no answer'}",
        "start it (llmtop gateway --vllm <vLLM URL>) or pass --gateway off",
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
    engines = up_engines(ctx)
    headroom = bool(engines) and all(
        e.kv_cache_usage_frac is not None
        and e.kv_cache_usage_frac < s.kv_high_frac
        and e.waiting == 0
        and not e.preemptions_per_s
        for e in engines
    )
    # The KV arithmetic bounds the headroom, with the same sizing as kv-exhausted (`kv_size`),
    # so the two never disagree: at what the cache holds per running sequence, a step up is the
    # preemptions coming back, whatever the gauge says now.
    sizes = [kv_size_now(ctx, e) for e in engines]
    known = [z for z in sizes if z is not None]
    fit = sum(z.fits for z in known) if known and len(known) == len(engines) else None
    if headroom and fit is not None and g.max_concurrency is not None:
        headroom = g.max_concurrency < fit
    basis = _basis(known) if fit is not None else ""
    if headroom:
        kv = combine(engines)  # several engines: the fullest cache
        bound = f" (up to ~{fit}: {basis})" if fit else ""
        action = (
            f"the engine has headroom (KV {fmt.frac(kv.kv_cache_usage_frac if kv else None)},"
            " 0 waiting): raise "
            f"max_concurrency a step with + and watch TTFT{bound}"
        )
    else:
        over = "is" if fit is not None and g.max_concurrency == fit else "is above"
        full = (
            f"the cap ({g.max_concurrency}) {over} what the KV cache holds at this request size "
            f"(~{fit}: {basis})"
            if fit is not None and g.max_concurrency is not None and g.max_concurrency >= fit
            else "the engine is full"
        )
        action = (
            f"{full}, so the queue and 429s protect it: add capacity (replicas/GPUs) or lower "
            "the offered load (rate limit); raising max_concurrency would only move the queue"
        )
    return Verdict(summary, action, severity="critical" if rejected > 0 else "warning")


def _basis(sizes: list[KvSize]) -> str:
    """The division behind the bound, for one engine; the sum's parts for several."""
    if len(sizes) == 1:
        return f"{sizes[0].division()}, {sizes[0].basis()}"
    return " + ".join(str(z.fits) for z in sizes) + " across the engines"


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
        slo = worst_reading(ctx, ctx.engines)  # a slowdown inside the SLO is a heads-up
        return Verdict(heads_up(slo, summary), action, severity=slo.severity("warning"))
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


def gateway_queue_over_slo(ctx: Context) -> Verdict | None:
    """Requests have waited in the gateway's queue past the TTFT SLO: their clients are late
    whatever the engine says (it sees only the admitted: at a low cap vLLM looks healthy while
    clients wait). Read from the queue now (its oldest age, the waits of those queued), not the
    admitted ones' waits (`gateway-saturated`): it fires seconds after the first late request."""
    g, s = ctx.gateway, ctx.settings
    if g is None or not g.up or g.oldest_queued_s is None or g.oldest_queued_s <= s.slo.ttft_s:
        return None
    late = sum(1 for a in g.queued_ages_s if a > s.slo.ttft_s)
    rejected = sum(g.rejected_per_s.values())
    # the ages list the first 1,000 only; without them (an older gateway) the oldest alone
    how_many = f"{late} of {fmt.count(g.queued)}" if late else "requests"
    summary = (
        f"{how_many} in the gateway's queue have waited past the TTFT SLO "
        f"({fmt.seconds(s.slo.ttft_s)}), the oldest {fmt.seconds(g.oldest_queued_s)}, at "
        f"{fmt.count(g.in_flight)}/{fmt.count(g.max_concurrency)} in flight; "
        + (f"{fmt.per_s(rejected)} 429s" if rejected else "no 429 yet")
    )
    severity: Severity = (
        "critical" if g.oldest_queued_s >= s.critical_slo_factor * s.slo.ttft_s else "warning"
    )
    return Verdict(summary, _queue_action(ctx, g), severity=severity)


def _queue_action(ctx: Context, g: GatewayStats) -> str:
    """Raise the cap when the engines have KV headroom below what their cache holds (sized as
    kv-exhausted sizes it, with the arithmetic); otherwise add capacity or refuse early."""
    s = ctx.settings
    engines = up_engines(ctx)
    sizes = [kv_size_now(ctx, e) for e in engines]
    known = [z for z in sizes if z is not None]
    fit = sum(z.fits for z in known) if known and len(known) == len(engines) else None
    kv = combine(engines)
    used = kv.kv_cache_usage_frac if kv is not None else None
    waiting = sum(e.waiting or 0.0 for e in engines)
    roomy = bool(engines) and all(
        e.kv_cache_usage_frac is not None
        and e.kv_cache_usage_frac < s.kv_high_frac
        and e.waiting == 0
        and not e.preemptions_per_s
        for e in engines
    )
    cap = g.max_concurrency
    below_fit = fit is not None and cap is not None and cap < fit
    if roomy and below_fit and fit is not None:
        sum_text = known[0].arithmetic() if len(known) == 1 else _basis(known)
        return (
            f"the engine has KV headroom (KV {fmt.frac(used)}, 0 waiting): raise the cap from "
            f"{cap} to ~{fit}: press + or :cap {fit} (gateway max_concurrency); {sum_text}"
        )
    if roomy and fit is None:
        return (
            f"the engine has KV headroom (KV {fmt.frac(used)}, 0 waiting): raise the cap a step "
            "with + and watch TTFT (what a request costs in KV is not known yet)"
        )
    state = f"KV {fmt.frac(used)}, {fmt.count(waiting)} waiting"
    if fit is not None and cap is not None and cap >= fit:
        state += f"; the cap ({cap}) is at or above the ~{fit} its KV cache holds"
    refuse = (
        "; the autopilot (mode auto) already refuses what cannot start within its SLO"
        if g.mode == "auto"
        else ", or let the autopilot refuse early (press a: a request that cannot start within "
        "the SLO then gets a 429 at once instead of waiting past it)"
    )
    return (
        f"the engine has no headroom ({state}): add capacity (replicas/GPUs) or lower the "
        f"offered load{refuse}; raising the cap would only move the queue into vLLM"
    )
