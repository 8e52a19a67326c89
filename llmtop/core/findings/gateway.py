"""The watched gateway's own admission: its queue near full, 429s or slow waits
(gateway-saturated), a request queued past the TTFT SLO (gateway-queue-over-slo), admission
paused (gateway-paused), the gateway not answering (gateway-down).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import GATEWAY_WINDOW_S, AlertSpec, G, duration, number
from llmtop.core.alerts.templates import Shown, figure, open_gateway, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, GatewayStats, Severity
from llmtop.core.derive.aggregate import combine
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.findings.kv_cache import kv_arithmetic
from llmtop.core.health.kvsize import KvSize
from llmtop.core.health.rulebase import Context, Rule, Verdict, kv_size_now, up_engines


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
    # The KV arithmetic bounds the headroom, with the same sizing as kv-exhausted (`kv_size`),
    # so the two never disagree: at what the cache holds per running sequence, a step up is the
    # preemptions coming back, whatever the gauge says now.
    headroom, known, fit = _room(ctx, engines)
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


def _room(ctx: Context, engines: Sequence[EngineStats]) -> tuple[bool, list[KvSize], int | None]:
    """Whether every engine has KV headroom (below kv_high_frac, 0 waiting, no preemption),
    the engines' sizes (`kv_size`) and what their caches hold together (None: one unsized)."""
    roomy = bool(engines) and all(
        e.kv_cache_usage_frac is not None
        and e.kv_cache_usage_frac < ctx.settings.kv_high_frac
        and e.waiting == 0
        and not e.preemptions_per_s
        for e in engines
    )
    known = [z for e in engines if (z := kv_size_now(ctx, e)) is not None]
    fit = sum(z.fits for z in known) if known and len(known) == len(engines) else None
    return roomy, known, fit


def _basis(sizes: list[KvSize]) -> str:
    """The division behind the bound, for one engine; the sum's parts for several."""
    if len(sizes) == 1:
        return f"{sizes[0].division()}, {sizes[0].basis()}"
    return " + ".join(str(z.fits) for z in sizes) + " across the engines"


QUEUED = "llmtop:gateway_queued"
"""Requests waiting in each gateway's queue, every priority (a recorded figure)."""


def _gw(spec: AlertSpec, series: str, how: Shown = "count") -> str:
    """One of the gateway's own series, of the alert's gateway."""
    return figure(spec, G + series, how)


def _engines(spec: AlertSpec) -> str:
    """A template listing the gateway's engines with the sum of what each KV cache holds."""
    r = spec.r
    if r == "instance":
        engines = "printf `llmtop:gateway_upstream{gateway=%q}` $labels.instance | query"
    else:
        engines = f"query `{P}kv_fits`"
    return (
        f"{{{{ range {engines} }}}}{{{{ $e := .Labels.{r} }}}} [{{{{ $e }}}}: "
        f"{kv_arithmetic(spec, '$e')}]{{{{ end }}}}"
    )


def _headroom_action(spec: AlertSpec) -> str:
    """`_queue_action`'s choice, made when the alert is sent: raise the cap toward what the
    engines behind the gateway hold when every one has headroom and the cap is below that;
    else add capacity or let the autopilot refuse early."""
    r = spec.r
    cap = spec.gateway(G + "limit_max_concurrency", f"{r}=%[1]q")
    raise_to = (
        f"max({cap}) < on () group_left () max(llmtop:gateway_kv_fits{{{r}=%[1]q}}) "
        f"and on () (max(llmtop:gateway_kv_roomy{{{r}=%[1]q}}) == 1)"
    )
    fits = _gw_side(spec, "kv_fits", "count")
    used = _gw_side(spec, "kv_usage_frac", "frac")
    return (
        f"{{{{ if printf `{raise_to}` $labels.{r} | query }}}}"
        f"the engine has KV headroom (KV {used}, 0 waiting): raise the cap from "
        f"{_gw(spec, 'limit_max_concurrency')} to ~{fits}: press + or :cap {fits} in llmtop "
        f"(gateway max_concurrency); what the KV caches hold:{_engines(spec)}"
        f"{{{{ else }}}}the engine has no headroom (KV {used}, "
        f"{_gw_side(spec, 'waiting', 'count')} waiting; the KV caches hold ~{fits}): add "
        "capacity (replicas/GPUs) or lower the offered load, or let the autopilot refuse early "
        "(press a in llmtop, or llmtop gateway --autopilot: a request that cannot start within "
        "the SLO then gets a 429 at once instead of waiting past it); raising the cap would "
        "only move the queue into vLLM{{ end }}"
    )


def _gw_side(spec: AlertSpec, name: str, how: Shown) -> str:
    """What the engines behind the alert's gateway hold (`figures._gateway_side`)."""
    return figure(spec, "llmtop:gateway_" + name, how)


def _rejected(spec: AlertSpec, extra: str = "", agg: str = "") -> str:
    """429s per second: the rejections by reason and the queue timeouts (an outcome)."""
    w = duration(spec.window_s)
    agg = agg or f"sum by ({spec.r})"
    timed_out = ",".join(x for x in ('outcome="timed_out"', extra) if x)
    return (
        f"{agg} (rate({spec.gateway(G + 'rejections_total', extra)}[{w}]) or "
        f"rate({spec.gateway(G + 'requests_total', timed_out)}[{w}]))"
    )


def _gateway_saturated_alert(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    gw_w = duration(spec.at_least_interval(GATEWAY_WINDOW_S))
    on = f"on ({r})"
    near = (
        f"{QUEUED} >= {on} {number(h.gateway_queue_near_frac)} * "
        f"(max by ({r}) ({spec.gateway(G + 'limit_max_queue')}) > 0)"
    )
    rejected = _rejected(spec)
    wait_p95 = (
        f"histogram_quantile(0.95, sum by ({r}, le) "
        f"(rate({spec.gateway(G + 'queue_wait_seconds_bucket')}[{gw_w}])))"
    )
    return Alert(
        f"{QUEUED} and {on} ({near} or {on} {rejected} > 0 or {on} "
        f"{wait_p95} > {number(h.queue_wait_slo_s)})",
        f"gateway {replica(spec)}: queue {value('count')}/{_gw(spec, 'limit_max_queue')}, "
        f"queue wait p95 over {gw_w} above {h.queue_wait_slo_s:g}s, or 429s; "
        f"{_gw(spec, 'in_flight')}/{_gw(spec, 'limit_max_concurrency')} in flight",
        open_gateway(spec),
        "queue >= gateway_queue_near_frac of max_queue, any 429 (queue_timeout included), or "
        f"the queue wait p95 over queue_wait_slo_s ({h.queue_wait_slo_s:g}s; the gateway's "
        f"{gw_w} window)",
        action=_headroom_action(spec),
        severity=f"{{{{ if printf `{_rejected(spec, f'{r}=%[1]q', 'sum')} > 0` $labels.{r} "
        "| query }}critical{{ else }}warning{{ end }}",
    )


GATEWAY_SATURATED = Definition(
    Rule("gateway-saturated", "warning", "gateway", gateway_saturated),
    guide=Guide(
        "gateway queue near max, 429s, queue wait p95 over SLO",
        "raise the cap if the engine has headroom, no higher than kv-exhausted's N; else add "
        "capacity",
    ),
    alert=_gateway_saturated_alert,
    reads=("gateway_queue_near_frac", "queue_wait_slo_s", "kv_target_frac"),
)


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
    engines = up_engines(ctx)
    roomy, known, fit = _room(ctx, engines)
    kv = combine(engines)
    used = kv.kv_cache_usage_frac if kv is not None else None
    waiting = sum(e.waiting or 0.0 for e in engines)
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


def _gateway_queue_over_slo_alert(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    oldest = f"max by ({r}) ({spec.gateway(G + 'oldest_queued_seconds')})"
    return Alert(
        f"{oldest} > {number(h.slo.ttft_s)}",
        f"gateway {replica(spec)}: {_gw_side(spec, 'queued', 'count')} requests in its queue, the "
        "oldest "
        f"waiting {value('seconds')}, past the TTFT SLO ({h.slo.ttft_s:g}s), at "
        f"{_gw(spec, 'in_flight')}/{_gw(spec, 'limit_max_concurrency')} in flight: their "
        "clients are late though vLLM looks healthy",
        open_gateway(spec),
        "the gateway's oldest queued request older than ttft_slo_s: the queue as it is now, "
        "not the waits of those already admitted (gateway-saturated), so it fires before any "
        "429. llmtop also counts how many queued are past the SLO; /metrics has the oldest only",
        action=_headroom_action(spec),
        severity=f"{{{{ if ge $value {number(h.critical_slo_factor * h.slo.ttft_s)} }}}}critical"
        "{{ else }}warning{{ end }}",
    )


GATEWAY_QUEUE_OVER_SLO = Definition(
    Rule("gateway-queue-over-slo", "warning", "gateway", gateway_queue_over_slo),
    guide=Guide(
        "a request has waited in the gateway's own queue past the TTFT SLO (before any 429)",
        "raise the cap to what the KV cache holds when the engine has headroom (with the "
        "arithmetic); else add capacity or let the autopilot refuse early",
    ),
    alert=_gateway_queue_over_slo_alert,
    reads=("slo.ttft_s", "critical_slo_factor", "kv_target_frac"),
)


def gateway_paused(ctx: Context) -> Verdict | None:
    g = ctx.gateway
    if g is None or not g.up or not g.paused:
        return None
    return Verdict(
        f"gateway admission is paused: {fmt.count(g.queued)} queued, none admitted",
        "resume admission (press p or :resume) when the engine is ready",
    )


def _gateway_paused_alert(spec: AlertSpec) -> Alert:
    return Alert(
        f"max by ({spec.r}) ({spec.gateway(G + 'paused')}) == 1",
        f"gateway {replica(spec)}: admission is paused: {_gw_side(spec, 'queued', 'count')} "
        "queued, none "
        "admitted",
        open_gateway(spec),
        "llmtop_gateway_paused == 1",
        action="resume admission (press p or :resume in llmtop) when the engine is ready",
    )


GATEWAY_PAUSED = Definition(
    Rule("gateway-paused", "warning", "gateway", gateway_paused, immediate=True),
    guide=Guide("admission is paused: requests wait, then time out", "`p` resumes"),
    alert=_gateway_paused_alert,
)


def gateway_down(ctx: Context) -> Verdict | None:
    g = ctx.gateway
    if g is None or g.up:
        return None
    return Verdict(
        f"llmtop gateway at {g.url} not answering: {g.error or 'no answer'}",
        "start it (llmtop gateway --vllm <vLLM URL>) or pass --gateway off",
    )


def _gateway_down_alert(spec: AlertSpec) -> Alert:
    r = spec.r
    if spec.gateway_matchers:
        expr = f"max by ({r}) ({spec.gateway('up')}) == 0"
    else:
        expr = (
            f"max by ({r}) (up) == 0 and on ({r}) count by ({r}) (last_over_time({G}in_flight[1h]))"
        )
    return Alert(
        expr,
        f"llmtop gateway at {replica(spec)} not answering its /metrics (up == 0)",
        open_gateway(spec),
        "up == 0 for the gateway's targets (without a gateway selector: targets that "
        "exported llmtop_gateway_in_flight in the last hour)",
        action="start it (llmtop gateway --vllm <vLLM URL>) or stop watching it",
    )


GATEWAY_DOWN = Definition(
    Rule("gateway-down", "warning", "gateway", gateway_down, immediate=True),
    guide=Guide(
        "the watched gateway does not answer its admin API", "start it, or `--gateway off`"
    ),
    alert=_gateway_down_alert,
)

FINDINGS = (GATEWAY_SATURATED, GATEWAY_QUEUE_OVER_SLO, GATEWAY_PAUSED, GATEWAY_DOWN)
