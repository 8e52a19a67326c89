"""The gateway's and the fleet's findings as alerting rules, mirroring `core.health.rules_edge`
and `core.health.rules_fleet` over the gateway's /metrics (llmtop_gateway_*) and the engines'
recorded figures. Pure.
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import GATEWAY_WINDOW_S, AlertSpec, duration, number
from llmtop.core.alerts.templates import (
    Shown,
    figure,
    open_fleet,
    open_gateway,
    replica,
    value,
)

G = "llmtop_gateway_"


def _gw(spec: AlertSpec, series: str, how: str = "count") -> str:
    """One of the gateway's own series, of the alert's gateway."""
    return figure(spec, G + series, how)  # type: ignore[arg-type]


def _queued(spec: AlertSpec) -> str:
    return "llmtop:gateway_queued"


def _engines(spec: AlertSpec) -> str:
    """A template listing the gateway's engines with the sum of what each KV cache holds."""
    r = spec.r
    if r == "instance":
        engines = "printf `llmtop:gateway_upstream{gateway=%q}` $labels.instance | query"
    else:
        engines = f"query `{P}kv_fits`"
    target = f"{spec.health.kv_target_frac * 100:g}%"

    def fig(name: str, how: Shown) -> str:
        return figure(spec, P + name, how, which="$e")

    return (
        f"{{{{ range {engines} }}}}{{{{ $e := .Labels.{r} }}}} [{{{{ $e }}}}: "
        f"{fig('kv_budget_tokens', 'tokens')} KV tokens ({target} target of "
        f"{fig('kv_capacity_tokens', 'tokens')}) / {fig('kv_request_tokens', 'tokens')} tokens "
        f"per request in {fig('kv_block_size', 'count')}-token blocks = "
        f"{fig('kv_fits', 'count')} sequences fit]{{{{ end }}}}"
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


def gateway_saturated(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    gw_w = duration(spec.at_least_interval(GATEWAY_WINDOW_S))
    on = f"on ({r})"
    near = (
        f"{_queued(spec)} >= {on} {number(h.gateway_queue_near_frac)} * "
        f"(max by ({r}) ({spec.gateway(G + 'limit_max_queue')}) > 0)"
    )
    rejected = _rejected(spec)
    wait_p95 = (
        f"histogram_quantile(0.95, sum by ({r}, le) "
        f"(rate({spec.gateway(G + 'queue_wait_seconds_bucket')}[{gw_w}])))"
    )
    return Alert(
        "gateway-saturated",
        f"{_queued(spec)} and {on} ({near} or {on} {rejected} > 0 or {on} "
        f"{wait_p95} > {number(h.queue_wait_slo_s)})",
        f"gateway {replica(spec)}: queue {value('count')}/{_gw(spec, 'limit_max_queue')}, "
        f"queue wait p95 over {gw_w} above {h.queue_wait_slo_s:g}s, or 429s; "
        f"{_gw(spec, 'in_flight')}/{_gw(spec, 'limit_max_concurrency')} in flight",
        _headroom_action(spec),
        open_gateway(spec),
        "queue >= gateway_queue_near_frac of max_queue, any 429 (queue_timeout included), or "
        f"the queue wait p95 over queue_wait_slo_s ({h.queue_wait_slo_s:g}s; the gateway's "
        f"{gw_w} window)",
        severity=(
            f"{{{{ if printf `{_rejected(spec, f'{r}=%[1]q', 'sum')} > 0` $labels.{r} | query }}}}"
            "critical{{ else }}warning{{ end }}"
        ),
    )


def gateway_queue_over_slo(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    oldest = f"max by ({r}) ({spec.gateway(G + 'oldest_queued_seconds')})"
    return Alert(
        "gateway-queue-over-slo",
        f"{oldest} > {number(h.slo.ttft_s)}",
        f"gateway {replica(spec)}: {_gw_side(spec, 'queued', 'count')} requests in its queue, the "
        "oldest "
        f"waiting {value('seconds')}, past the TTFT SLO ({h.slo.ttft_s:g}s), at "
        f"{_gw(spec, 'in_flight')}/{_gw(spec, 'limit_max_concurrency')} in flight: their "
        "clients are late though vLLM looks healthy",
        _headroom_action(spec),
        open_gateway(spec),
        "the gateway's oldest queued request older than ttft_slo_s: the queue as it is now, "
        "not the waits of those already admitted (gateway-saturated), so it fires before any "
        "429. llmtop also counts how many queued are past the SLO; /metrics has the oldest only",
        severity=(
            f"{{{{ if ge $value {number(h.critical_slo_factor * h.slo.ttft_s)} }}}}critical"
            "{{ else }}warning{{ end }}"
        ),
    )


def gateway_paused(spec: AlertSpec) -> Alert:
    return Alert(
        "gateway-paused",
        f"max by ({spec.r}) ({spec.gateway(G + 'paused')}) == 1",
        f"gateway {replica(spec)}: admission is paused: {_gw_side(spec, 'queued', 'count')} "
        "queued, none "
        "admitted",
        "resume admission (press p or :resume in llmtop) when the engine is ready",
        open_gateway(spec),
        "llmtop_gateway_paused == 1",
    )


def gateway_down(spec: AlertSpec) -> Alert:
    r = spec.r
    if spec.gateway_matchers:
        expr = f"max by ({r}) ({spec.gateway('up')}) == 0"
    else:
        expr = (
            f"max by ({r}) (up) == 0 and on ({r}) count by ({r}) (last_over_time({G}in_flight[1h]))"
        )
    return Alert(
        "gateway-down",
        expr,
        f"llmtop gateway at {replica(spec)} not answering its /metrics (up == 0)",
        "start it (llmtop gateway --vllm <vLLM URL>) or stop watching it",
        open_gateway(spec),
        "up == 0 for the gateway's targets (without a gateway selector: targets that "
        "exported llmtop_gateway_in_flight in the last hour)",
    )


def replica_outlier(spec: AlertSpec) -> Alert:
    f, r = spec.fleet_rules, spec.r
    on = f"on ({r})"

    def median(fig: str, times: float = 1.0) -> str:
        factor = "" if times == 1.0 else f"{number(times)} * "
        return f"on () group_left () ({factor}quantile(0.5, {P}{fig}))"

    def enough(fig: str) -> str:
        return f"and on () (count({P}{fig}) >= {f.outlier_min_replicas})"

    def named(expr: str, fig: str, bottleneck: str) -> str:
        return (
            f'label_replace(label_replace({expr}, "figure", "{fig}", "", ""), '
            f'"bottleneck", "{bottleneck}", "", "")'
        )

    waiting = (
        f"({P}waiting >= {median('waiting', f.outlier_factor)} and {on} "
        f"{P}waiting - {median('waiting')} >= {number(f.outlier_waiting_min)} "
        f"{enough('waiting')})"
    )
    kv = (
        f"({P}kv_usage_frac >= {number(f.kv_high_frac)} and {on} "
        f"{P}kv_usage_frac - {median('kv_usage_frac')} >= {number(f.outlier_kv_gap)} "
        f"{enough('kv_usage_frac')})"
    )
    ttft = (
        f"({P}ttft_p95_seconds > {number(f.ttft_slo_s)} and {on} {P}ttft_p95_seconds >= "
        f"{median('ttft_p95_seconds', f.outlier_factor)} {enough('ttft_p95_seconds')})"
    )
    standing = (
        f"({named(waiting, 'waiting', 'queue')}\nor {on} {named(kv, 'kv', 'kv')}"
        f"\nor {on} {named(ttft, 'ttft', 'queue')})"
    )
    return Alert(
        "replica-outlier",
        # half the fleet standing out is no outlier (llmtop's rule says the same)
        f"{standing}\nand on () (count({standing}) * 2 <= count({P}running))",
        f"replica {replica(spec)} stands out: {{{{ $labels.figure }}}} {value('number')} "
        "against the median of the replicas (waiting, KV use or TTFT p95)",
        f"{replica(spec)}: more than a fair share of requests, or slower serving: read the "
        "replica's own findings; take it out of rotation until it recovers, and check the "
        "balancer's routing (session affinity, prefix-aware hashing) or the replica's GPU",
        open_fleet(spec),
        "one replica's waiting (outlier_factor x and outlier_waiting_min over), KV use "
        "(kv_high_frac and outlier_kv_gap over) or TTFT p95 (over the SLO and outlier_factor "
        "x) against the median; PromQL's median is of all the replicas, the replica itself "
        "included, where llmtop's is of the others (equal for three replicas when the other "
        "two are equal)",
        bottleneck="",
    )


def load_imbalance(spec: AlertSpec) -> Alert:
    f, r = spec.fleet_rules, spec.r
    load = f"({P}running + on ({r}) {P}waiting)"
    return Alert(
        "load-imbalance",
        f"topk(1, {load}) >= on () group_left () {number(f.imbalance_factor)} * avg({load})"
        f" and on () (max({load}) - min({load}) >= {number(f.imbalance_min_load)})"
        f" and on () (count({load}) >= 2)",
        f"uneven load across the replicas: {replica(spec)} carries {value('count')} in flight "
        "(running + waiting), at least "
        f"{f.imbalance_factor:g}x the mean",
        "the balancer does not spread requests: prefer least-outstanding-requests routing over "
        "round-robin or hashing, and check session affinity and prefix-aware routing",
        open_fleet(spec),
        "the busiest replica carries imbalance_factor x the mean in-flight, and "
        "imbalance_min_load more than the idlest",
    )


EDGE_ALERTS = (
    gateway_saturated,
    gateway_queue_over_slo,
    gateway_paused,
    gateway_down,
    replica_outlier,
    load_imbalance,
)
