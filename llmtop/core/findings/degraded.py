"""Latency over the SLO while requests still succeed (degraded-200), with the resource
that binds (kv, queue, prefill, decode) and the fix for it.
"""

from __future__ import annotations

import math

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, number
from llmtop.core.alerts.templates import figure, open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import Bottleneck, EngineStats, Severity
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.findings.kv_cache import (
    decode_cap,
    kv_arithmetic,
    kv_pressed_expr,
    running_cap,
    templated_cap,
)
from llmtop.core.health.rulebase import (
    Context,
    Rule,
    Verdict,
    cap_action,
    kv_pressed,
    kv_size_now,
    up_engines,
    where,
)

_WHY = {
    "kv": "KV cache is full",
    "queue": "requests queue inside vLLM",
    "decode": "too many sequences share each decode step",
}
"""Why a cap helps, by the bottleneck: the check's words and the alert's."""


def itl_tail_from_prefill(e: EngineStats, itl_slo_s: float) -> bool:
    """Whether the running sequences alone fit the ITL SLO at the measured decode rate: N
    sequences sharing D decode tok/s see a mean ITL of N / D. Within the SLO while the p95 is
    not, the slow steps are those a prefill chunk (or a recompute) shares: "cap concurrency"
    would be the wrong advice."""
    if not e.running or not e.decode_tok_per_s:
        return False
    return e.running / e.decode_tok_per_s <= itl_slo_s


def degraded_200(ctx: Context) -> Verdict | None:
    s = ctx.settings
    # the gateway sees a stuck request at once; vLLM's TTFT histogram only once it is answered
    g = ctx.gateway
    stuck = g.oldest_unanswered_s if g is not None and g.up else None
    stuck_over = stuck is not None and stuck > s.slo.ttft_s
    for e in up_engines(ctx):
        p95_over = e.ttft_p95_s is not None and e.ttft_p95_s > s.slo.ttft_s
        ttft_over = p95_over or stuck_over
        itl_over = e.itl_p95_s is not None and e.itl_p95_s > s.slo.itl_s
        if not (ttft_over or itl_over):
            continue
        done = sum(e.finished_per_s.values())
        errors = e.finished_per_s.get("error", 0.0)
        if done > 0 and errors / done > s.error_rate_max:
            continue  # failing, not "200 OK but degraded"
        parts = []
        if p95_over:
            parts.append(f"TTFT p95 {fmt.seconds(e.ttft_p95_s)} (SLO {fmt.seconds(s.slo.ttft_s)})")
        if stuck_over:
            parts.append(
                f"a request at the engine has waited {fmt.seconds(stuck)} for its first token "
                f"(SLO {fmt.seconds(s.slo.ttft_s)})"
            )
        if itl_over:
            parts.append(f"ITL p95 {fmt.seconds(e.itl_p95_s)} (SLO {fmt.seconds(s.slo.itl_s)})")
        worst = max(
            (e.ttft_p95_s or 0.0) / s.slo.ttft_s,
            (stuck or 0.0) / s.slo.ttft_s,
            (e.itl_p95_s or 0.0) / s.slo.itl_s,
        )
        severity: Severity = "critical" if worst >= s.critical_slo_factor else "warning"
        load = f"{fmt.count(e.running)} running, {fmt.count(e.waiting)} waiting"
        summary = f"{where(ctx, e)}{', '.join(parts)} with ~0 errors; {load}"
        bottleneck: Bottleneck
        queue_share = (
            e.queue_time_mean_s / e.ttft_mean_s
            if e.queue_time_mean_s is not None and e.ttft_mean_s
            else None
        )
        if kv_pressed(ctx, e):
            bottleneck = "kv"
            size = kv_size_now(ctx, e)
            action = cap_action(size.fits if size else None, _WHY["kv"], ctx)
        elif ttft_over and (
            (queue_share is not None and queue_share >= 0.5) or (e.waiting or 0) > 0
        ):
            bottleneck = "queue"
            n = max(1, int(e.running)) if e.running else None
            action = cap_action(n, _WHY["queue"], ctx)
        elif itl_over and not ttft_over and itl_tail_from_prefill(e, s.slo.itl_s):
            bottleneck = "prefill"
            action = (
                "decode steps wait behind prefill chunks (the mean ITL is within the SLO, the "
                "tail is not): cap in-flight prompt tokens at the gateway "
                "(max_inflight_prompt_tokens), or restart vLLM with a lower "
                "--max-num-batched-tokens (smaller prefill chunks: better ITL, slower TTFT)"
            )
        elif itl_over and not ttft_over:
            bottleneck = "decode"
            n = max(1, math.floor((e.decode_tok_per_s or 0.0) * s.slo.itl_s)) or None
            why = _WHY["decode"]
            action = cap_action(n, why, ctx)
        else:
            bottleneck = "prefill"
            action = (
                "prompts are expensive: cap in-flight prompt tokens at the gateway "
                "(max_inflight_prompt_tokens), enable prefix caching, or add capacity"
            )
        return Verdict(summary, action, severity=severity, bottleneck=bottleneck)
    return None


def _degraded_200_alert(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    on = f"on ({r})"
    slo, itl = number(h.slo.ttft_s), number(h.slo.itl_s)
    degraded = f"({P}slo_ratio > 1 unless {on} {P}error_frac > {number(h.error_rate_max)})"
    ttft_over = f"({P}ttft_p95_seconds > {slo} or {on} {P}gateway_unanswered_seconds > {slo})"
    itl_over = f"({P}itl_p95_seconds > {itl})"
    queue = (
        f"({ttft_over} and {on} ({P}queue_time_mean_seconds / {on} {P}ttft_mean_seconds >= 0.5"
        f" or {on} {P}waiting > 0))"
    )
    tail = f"(({P}running > 0) / {on} ({P}decode_tok_per_s > 0) <= {itl})"
    itl_only = f"({degraded} and {on} {itl_over} unless {on} {ttft_over})"

    def named(expr: str, bottleneck: str) -> str:
        return f'label_replace({expr}, "bottleneck", "{bottleneck}", "", "")'

    expr = f"\nor {on} ".join(
        (
            named(f"{degraded} and {on} {kv_pressed_expr(spec)}", "kv"),
            named(f"{degraded} and {on} {queue}", "queue"),
            named(f"{itl_only} and {on} {tail}", "prefill"),
            named(itl_only, "decode"),
            named(degraded, "prefill"),
        )
    )
    running = figure(spec, P + "running", "count")
    action = (
        '{{ if eq $labels.bottleneck "kv" }}'
        + templated_cap(figure(spec, P + "kv_fits", "count"), _WHY["kv"])
        + f"; {kv_arithmetic(spec)}"
        + '{{ else if eq $labels.bottleneck "queue" }}'
        + templated_cap(running_cap(spec), _WHY["queue"])
        + '{{ else if eq $labels.bottleneck "decode" }}'
        + templated_cap(decode_cap(spec), _WHY["decode"])
        + "{{ else }}prompts are expensive, or decode steps wait behind prefill chunks: cap "
        "in-flight prompt tokens at the gateway (max_inflight_prompt_tokens), enable prefix "
        "caching, or restart vLLM with a lower --max-num-batched-tokens{{ end }}"
    )
    return Alert(
        expr,
        f"{replica(spec)}: TTFT p95 {figure(spec, P + 'ttft_p95_seconds', 'seconds')} (SLO "
        f"{h.slo.ttft_s:g}s), ITL p95 {figure(spec, P + 'itl_p95_seconds', 'seconds')} (SLO "
        f"{h.slo.itl_s:g}s), {value('number')}x its SLO, with ~0 errors; {running} running, "
        f"{figure(spec, P + 'waiting', 'count')} waiting",
        open_replica(spec),
        "TTFT p95, ITL p95 or the gateway's oldest unanswered request over its SLO while "
        "errors stay under error_rate_max; the bottleneck (a label) as llmtop names it: kv, "
        "queue, prefill (ITL tail with the mean within the SLO), decode, else prefill",
        action=action,
        severity=f"{{{{ if ge $value {number(h.critical_slo_factor)} }}}}critical"
        "{{ else }}warning{{ end }}",
        bottleneck="",
    )


DEGRADED_200 = Definition(
    Rule("degraded-200", "warning", "queue", degraded_200),
    guide=Guide(
        "TTFT p95 > 2 s or ITL p95 > 100 ms while errors are ~0",
        "by the bottleneck named",
        bottleneck="kv / queue / decode / prefill",
    ),
    alert=_degraded_200_alert,
    reads=(
        "slo.ttft_s",
        "slo.itl_s",
        "error_rate_max",
        "critical_slo_factor",
        "kv_high_frac",
        "kv_target_frac",
    ),
)

FINDINGS = (DEGRADED_200,)
