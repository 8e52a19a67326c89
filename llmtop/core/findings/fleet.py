"""What only a comparison of a fleet's replicas shows: replicas down (replica-down), one
far above the others' median in waiting, KV or TTFT p95 (replica-outlier), the busiest
carrying several times the mean in flight (load-imbalance). Checks over the leaves
(single-engine servers and the engines of data-parallel ones); a restart is an event, not a
finding (`pipeline.fleet`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, number
from llmtop.core.alerts.templates import open_fleet, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import Bottleneck, EngineStats, Replica
from llmtop.core.dialects.engines import BY_KIND
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import FleetView, Rule, Verdict
from llmtop.core.health.thresholds import FleetRules

SHOWN = 4
"""Replicas named in one finding before "and N more"."""


def _names(rows: Sequence[Replica], describe: Callable[[Replica], str]) -> str:
    shown = [describe(r) for r in rows[:SHOWN]]
    if len(rows) > SHOWN:
        shown.append(f"and {len(rows) - SHOWN} more")
    return ", ".join(shown)


def replica_down(view: FleetView) -> Verdict | None:
    down = [r for r in view.servers if not r.stats.up]
    if not down:
        return None
    listed = _names(down, lambda r: f"{r.name} ({r.stats.error or 'no answer'})")
    rest = len(view.servers) - len(down)
    return Verdict(
        f"{len(down)} of {len(view.servers)} replicas down: {listed}",
        "check those vLLM processes and their logs (crashed, OOM-killed, still loading?); "
        + (f"the other {rest} carry their load meanwhile" if rest else "no replica serves"),
    )


REPLICA_DOWN = Definition(
    Rule("replica-down", "critical", "target", replica_down, immediate=True),
    guide=Guide("a fleet: replicas that do not answer", "check them; the others carry the load"),
    alert="the fleet's name for target-down: LlmtopTargetDown fires per replica",
)


@dataclass(frozen=True)
class _Figure:
    label: str
    bottleneck: Bottleneck
    read: Callable[[EngineStats], float | None]
    show: Callable[[float | None], str]


_FIGURES = (
    _Figure("waiting", "queue", lambda e: e.waiting, fmt.count),
    _Figure("KV", "kv", lambda e: e.kv_cache_usage_frac, fmt.frac),
    _Figure("TTFT p95", "queue", lambda e: e.ttft_p95_s, fmt.seconds),
)


def _stands_out(fig: _Figure, value: float, median: float, rules: FleetRules) -> bool:
    if fig.label == "waiting":
        far = value - median >= rules.outlier_waiting_min
        return far and value >= rules.outlier_factor * median
    if fig.label == "KV":
        return value >= rules.kv_high_frac and value - median >= rules.outlier_kv_gap
    return value > rules.ttft_slo_s and value >= rules.outlier_factor * median


def _medians_of_others(values: list[float]) -> list[float] | None:
    """`statistics.median` of each value's peers (all the others), from one sort instead of
    one per replica: the same middle values, the same sum. None (each replica's peers are
    sorted then) with fewer than two values or a NaN, which has no place in a sort."""
    n = len(values)
    if n < 2 or any(map(math.isnan, values)):
        return None
    order = sorted(range(n), key=values.__getitem__)  # stable, as sorted(peers) is
    ranked = [values[i] for i in order]
    half, odd = divmod(n - 1, 2)
    # A value's peers are `ranked` without its place: their middle is one of two values (an
    # odd count of peers) or three means (even), by the side of the middle the place is on.
    if odd:
        above, at_or_below = ranked[half], ranked[half + 1]
        middles = [above if place > half else at_or_below for place in range(n)]
    else:
        above = (ranked[half - 1] + ranked[half]) / 2
        at = (ranked[half - 1] + ranked[half + 1]) / 2
        below = (ranked[half] + ranked[half + 1]) / 2
        middles = [above if place > half else at if place == half else below for place in range(n)]
    out = [0.0] * n
    for place, i in enumerate(order):
        out[i] = middles[place]
    return out


def alike(rows: Sequence[Replica]) -> list[Sequence[Replica]]:
    """The rows in groups of one engine kind and one model (in the order first seen): what a
    fleet finding compares, like with like. A llama.cpp with 2 slots beside vLLMs batching 256
    is no outlier for its queue, nor a 70B beside 8Bs for its TTFT. One group, the rows as they
    are, when the fleet is all alike (the usual case: no copy)."""
    if not rows:
        return []
    first = rows[0].stats
    kind = (first.engine, first.model)
    if all((r.stats.engine, r.stats.model) == kind for r in rows):
        return [rows]
    groups: dict[tuple[str | None, str | None], list[Replica]] = {}
    for r in rows:
        groups.setdefault((r.stats.engine, r.stats.model), []).append(r)
    return list(groups.values())


def _where(group: Sequence[Replica], mixed: bool) -> str:
    """The other replicas a value is compared with, named by their engine and model in a fleet
    of several kinds."""
    if not mixed:
        return ""
    s = group[0].stats
    d = BY_KIND.get(s.engine or "")
    what = " ".join(x for x in (s.model, d.title if d else s.engine) if x)
    return f" ({what})" if what else ""


def replica_outlier(view: FleetView) -> Verdict | None:
    rules = view.rules
    up = [r for r in view.leaves if r.stats.up and not r.stats.stats_disabled]
    found: dict[str, list[str]] = {}
    bottleneck: Bottleneck | None = None
    order: list[Replica] = []
    groups = alike(up)
    for group in groups:
        standing, fig_bottleneck = _outliers(group, rules, found, len(groups) > 1)
        if standing and len(standing) * 2 <= len(group):  # half a group is no outlier: the
            order += standing  # fleet rules and each row say the rest
            bottleneck = bottleneck or fig_bottleneck
    if not order:
        return None
    names = ", ".join(r.name for r in order[:SHOWN])
    if len(order) == 1:
        summary = f"{names} stands out: {', '.join(found[order[0].key])}"
    else:
        listed = "; ".join(f"{r.name}: {', '.join(found[r.key])}" for r in order[:SHOWN])
        summary = f"{names} stand out: {listed}"
    return Verdict(
        summary,
        f"{names}: more than a fair share of requests, or slower serving: read the replica's "
        "own findings (its row); take it out of rotation until it recovers, and check the "
        "balancer's routing (session affinity, prefix-aware hashing) or the replica's GPU",
        bottleneck=bottleneck,
    )


def _outliers(
    group: Sequence[Replica], rules: FleetRules, found: dict[str, list[str]], mixed: bool
) -> tuple[list[Replica], Bottleneck | None]:
    """The rows of one group of alike replicas that stand out from its others' median, in the
    order found; what each stands out by goes into `found`."""
    order: list[Replica] = []
    bottleneck: Bottleneck | None = None
    distinct = len({id(r) for r in group}) == len(group)  # a row's peers: all the other rows
    where = _where(group, mixed)
    for fig in _FIGURES:
        known = [(r, v) for r in group if (v := fig.read(r.stats)) is not None]
        if len(known) < rules.outlier_min_replicas:
            continue
        medians = _medians_of_others([v for _, v in known]) if distinct else None
        for i, (r, v) in enumerate(known):
            if medians is not None:
                median, others = medians[i], len(known) - 1
            else:
                peers = [p for q, p in known if q is not r]
                median, others = statistics.median(peers), len(peers)
            if not _stands_out(fig, v, median, rules):
                continue
            if r.key not in found:
                found[r.key] = []
                order.append(r)
            found[r.key].append(
                f"{fig.label} {fig.show(v)} vs a median of {fig.show(median)} on the other "
                f"{others}{where}"
            )
            bottleneck = bottleneck or fig.bottleneck
    return order, bottleneck


def _replica_outlier_alert(spec: AlertSpec) -> Alert:
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
        f"{standing}\nand on () (count({standing}) * 2 <= count({P}running))",
        f"replica {replica(spec)} stands out: {{{{ $labels.figure }}}} {value('number')} "
        "against the median of the replicas (waiting, KV use or TTFT p95)",
        open_fleet(spec),
        "one replica's waiting (outlier_factor x and outlier_waiting_min over), KV use "
        "(kv_high_frac and outlier_kv_gap over) or TTFT p95 (over the SLO and outlier_factor "
        "x) against the median; PromQL's median is of all the replicas, the replica itself "
        "included, where llmtop's is of the others (equal for three replicas when the other "
        "two are equal)",
        action=f"{replica(spec)}: more than a fair share of requests, or slower serving: read the "
        "replica's own findings; take it out of rotation until it recovers, and check the "
        "balancer's routing (session affinity, prefix-aware hashing) or the replica's GPU",
        bottleneck="",
    )


REPLICA_OUTLIER = Definition(
    Rule("replica-outlier", "warning", "queue", replica_outlier),
    guide=Guide(
        "a fleet: one replica far above the others' median; in-flight spread unevenly",
        "check that replica; balance the router",
    ),
    alert=_replica_outlier_alert,
    reads=(
        "outlier_min_replicas",
        "outlier_factor",
        "outlier_waiting_min",
        "outlier_kv_gap",
        "kv_high_frac",
        "ttft_slo_s",
    ),
)


def load_imbalance(view: FleetView) -> Verdict | None:
    rows = [r for r in view.leaves if r.stats.up and r.stats.running is not None]
    groups = alike(rows)
    for group in groups:
        found = _imbalance(group, view.rules, _where(group, len(groups) > 1))
        if found is not None:
            return found
    return None


def _imbalance(rows: Sequence[Replica], rules: FleetRules, where: str) -> Verdict | None:
    """Load imbalance among alike replicas (`alike`)."""
    loads = [(r, (r.stats.running or 0.0) + (r.stats.waiting or 0.0)) for r in rows]
    if len(loads) < 2:
        return None
    mean = sum(v for _, v in loads) / len(loads)
    busiest = max(loads, key=lambda x: x[1])
    idlest = min(loads, key=lambda x: x[1])
    spread = busiest[1] - idlest[1]
    if busiest[1] < rules.imbalance_factor * mean or spread < rules.imbalance_min_load:
        return None
    return Verdict(
        f"uneven load across {len(loads)} replicas{where}: in flight (running + waiting) from "
        f"{fmt.count(idlest[1])} on {idlest[0].name} to {fmt.count(busiest[1])} on "
        f"{busiest[0].name}, mean {mean:.1f}",
    )


def _load_imbalance_alert(spec: AlertSpec) -> Alert:
    f, r = spec.fleet_rules, spec.r
    load = f"({P}running + on ({r}) {P}waiting)"
    return Alert(
        f"topk(1, {load}) >= on () group_left () {number(f.imbalance_factor)} * avg({load})"
        f" and on () (max({load}) - min({load}) >= {number(f.imbalance_min_load)})"
        f" and on () (count({load}) >= 2)",
        f"uneven load across the replicas: {replica(spec)} carries {value('count')} in flight "
        "(running + waiting), at least "
        f"{f.imbalance_factor:g}x the mean",
        open_fleet(spec),
        "the busiest replica carries imbalance_factor x the mean in-flight, and "
        "imbalance_min_load more than the idlest",
    )


LOAD_IMBALANCE = Definition(
    Rule("load-imbalance", "warning", "queue", load_imbalance),
    advice="the balancer does not spread requests: prefer least-outstanding-requests routing "
    "over round-robin or hashing, and check session affinity and prefix-aware routing",
    guide="replica-outlier",
    alert=_load_imbalance_alert,
    reads=("imbalance_factor", "imbalance_min_load"),
)

FINDINGS = (REPLICA_DOWN, REPLICA_OUTLIER, LOAD_IMBALANCE)
