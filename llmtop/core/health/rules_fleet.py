"""Fleet rules: what only a comparison of replicas shows (replica-down; replica-outlier: waiting,
KV or TTFT p95 far above the others' median; load-imbalance: the busiest carries several times
the mean in flight). Pure checks with hysteresis over the leaves (single-engine servers and the
engines of data-parallel ones); a restart is an event, not a finding (`pipeline.fleet`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmtop.core.base import format as fmt
from llmtop.core.base.slo import SloSettings
from llmtop.core.base.snapshot import Bottleneck, EngineStats, Finding, Replica
from llmtop.core.health.rulebase import Hysteresis, Rule, Verdict
from llmtop.core.health.thresholds import HealthSettings

SHOWN = 4
"""Replicas named in one finding before "and N more"."""


@dataclass(frozen=True)
class FleetRules:
    """Thresholds of the fleet rules; a replica's own rules keep `HealthSettings`."""

    outlier_min_replicas: int = 3
    """Replicas needed to call one an outlier (it is compared with the median of the others)."""
    outlier_factor: float = 3.0
    """An outlier's waiting or TTFT p95 is at least this many times the others' median..."""
    outlier_waiting_min: float = 8.0
    """...and waits at least this many requests more than that median."""
    outlier_kv_gap: float = 0.3
    """An outlier's KV usage is full (kv_high_frac) and this far above the others' median."""
    imbalance_factor: float = 2.0
    """The busiest replica carries at least this many times the mean in-flight requests..."""
    imbalance_min_load: float = 8.0
    """...and this many more than the idlest."""
    kv_high_frac: float = 0.9
    ttft_slo_s: float = SloSettings().ttft_s
    """The TTFT SLO (HealthSettings.slo, through `of`)."""
    fire_after_s: float = 3.0
    clear_after_s: float = 10.0

    @classmethod
    def of(cls, health: HealthSettings) -> FleetRules:
        """The defaults with health's KV mark, TTFT SLO and holds: the fleet pipeline's and
        the rules file's."""
        return cls(
            kv_high_frac=health.kv_high_frac,
            ttft_slo_s=health.slo.ttft_s,
            fire_after_s=health.fire_after_s,
            clear_after_s=health.clear_after_s,
        )


@dataclass(frozen=True)
class FleetView:
    """What the fleet rules see at one poll."""

    time: float
    servers: Sequence[Replica]
    """One row per server (a data-parallel server's engines are not here)."""
    leaves: Sequence[Replica]
    """What is compared: single-engine servers and the engines of data-parallel servers."""
    rules: FleetRules


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


def replica_outlier(view: FleetView) -> Verdict | None:
    rules = view.rules
    up = [r for r in view.leaves if r.stats.up and not r.stats.stats_disabled]
    found: dict[str, list[str]] = {}
    bottleneck: Bottleneck | None = None
    order: list[Replica] = []
    distinct = len({id(r) for r in up}) == len(up)  # a row's peers: all the other rows
    for fig in _FIGURES:
        known = [(r, v) for r in up if (v := fig.read(r.stats)) is not None]
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
                f"{fig.label} {fig.show(v)} vs a median of {fig.show(median)} on the other {others}"
            )
            bottleneck = bottleneck or fig.bottleneck
    if not order or len(order) * 2 > len(up):
        return None  # half the fleet is no outlier: the fleet rules and each row say the rest
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


def load_imbalance(view: FleetView) -> Verdict | None:
    rules = view.rules
    loads = [
        (r, (r.stats.running or 0.0) + (r.stats.waiting or 0.0))
        for r in view.leaves
        if r.stats.up and r.stats.running is not None
    ]
    if len(loads) < 2:
        return None
    mean = sum(v for _, v in loads) / len(loads)
    busiest = max(loads, key=lambda x: x[1])
    idlest = min(loads, key=lambda x: x[1])
    spread = busiest[1] - idlest[1]
    if busiest[1] < rules.imbalance_factor * mean or spread < rules.imbalance_min_load:
        return None
    return Verdict(
        f"uneven load across {len(loads)} replicas: in flight (running + waiting) from "
        f"{fmt.count(idlest[1])} on {idlest[0].name} to {fmt.count(busiest[1])} on "
        f"{busiest[0].name}, mean {mean:.1f}",
        "the balancer does not spread requests: prefer least-outstanding-requests routing over "
        "round-robin or hashing, and check session affinity and prefix-aware routing",
    )


FleetRule = Rule[FleetView]
"""A fleet rule: the engine rules' `Rule` over the fleet's view."""

FLEET_RULES: tuple[FleetRule, ...] = (
    FleetRule("replica-down", "critical", "target", replica_down, immediate=True),
    FleetRule("replica-outlier", "warning", "queue", replica_outlier),
    FleetRule("load-imbalance", "warning", "queue", load_imbalance),
)


class FleetHealth:
    """The fleet rules with the same hysteresis as `HealthState`: hold to fire, stay false to
    clear (immediate rules at once)."""

    def __init__(self, rules: FleetRules) -> None:
        self.rules = rules
        self._held = Hysteresis(FLEET_RULES)

    def evaluate(self, view: FleetView) -> tuple[Finding, ...]:
        """The fleet findings active at `view.time`, critical first."""
        r = self.rules
        return self._held.evaluate(view, view.time, r.fire_after_s, r.clear_after_s)
