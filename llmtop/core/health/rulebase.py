"""The vocabulary of the findings' checks: what a check sees (`Context` for an engine's,
`FleetView` for the fleet's), what it says (`Verdict`), what the hysteresis judges (`Rule`),
and the helpers the finding modules (core/findings) share. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from llmtop.core.base.snapshot import (
    Bottleneck,
    EngineStats,
    Finding,
    GatewayStats,
    GpuStats,
    Replica,
    Severity,
    Snapshot,
)
from llmtop.core.dialects.engines import BY_KIND, VLLM
from llmtop.core.health.kv_maxima import KvMaxima
from llmtop.core.health.kvsize import KvSize, kv_size
from llmtop.core.health.thresholds import FleetRules, HealthSettings

_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
X = TypeVar("X")
"""What a rule sees: an engine's `Context`, or the fleet's view."""


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
    kv_maxima: KvMaxima | None = None
    """The KV look-backs over `history`, kept by the pipeline (made from `history` without)."""


@dataclass(frozen=True)
class FleetView:
    """What the fleet's checks see at one poll."""

    time: float
    servers: Sequence[Replica]
    """One row per server (a data-parallel server's engines are not here)."""
    leaves: Sequence[Replica]
    """What is compared: single-engine servers and the engines of data-parallel servers."""
    rules: FleetRules


@dataclass(frozen=True)
class Verdict:
    """A rule that holds: the evidence and the fix, with optional overrides of the rule's class."""

    summary: str
    action: str = ""
    """"": the rule's own `advice`."""
    severity: Severity | None = None
    bottleneck: Bottleneck | None = None


@dataclass(frozen=True)
class Rule(Generic[X]):
    """One health rule: an id, its default class, and a pure check of what it sees (`Context`
    for an engine's rules, the fleet's view for the fleet rules)."""

    id: str
    severity: Severity
    bottleneck: Bottleneck
    check: Callable[[X], Verdict | None]
    advice: str = ""
    """Its static action, the words of a Verdict that brings none (and of its alert's)."""
    immediate: bool = False
    """Fire and clear without hysteresis (the fact itself is not noisy: a target is down)."""
    fire_after_s: float | None = None
    """Its own hold before firing, shorter than the settings' (None: theirs), for a figure
    already averaged where it is measured (the gateway's 1 s stream rates: 0.5 s is the next
    poll agreeing, whatever the polls' jitter)."""


@dataclass
class _Held:
    pending_since: float | None = None
    fired_since: float | None = None
    false_since: float | None = None
    verdict: Verdict | None = None


class Hysteresis(Generic[X]):
    """A check must hold `fire_after_s` to fire and stay false `clear_after_s` to clear
    (immediate rules at once), so one noisy poll neither raises nor drops a finding. One home
    for the engine rules (`catalog.HealthState`) and the fleet's (`catalog.FleetHealth`)."""

    def __init__(self, rules: Sequence[Rule[X]]) -> None:
        self.rules = tuple(rules)
        self._held: dict[str, _Held] = {r.id: _Held() for r in self.rules}
        self._pairs = tuple((r, self._held[r.id]) for r in self.rules)
        """Each rule with its state, as `evaluate` walks them (once per replica and poll)."""

    def evaluate(
        self, seen: X, t: float, fire_after_s: float, clear_after_s: float
    ) -> tuple[Finding, ...]:
        """The findings active at `t`, critical first."""
        out: list[Finding] = []
        for rule, st in self._pairs:
            verdict = rule.check(seen)
            if verdict is not None:
                st.verdict, st.false_since = verdict, None
                if st.fired_since is None:
                    if st.pending_since is None:
                        st.pending_since = t
                    hold = fire_after_s if rule.fire_after_s is None else rule.fire_after_s
                    if rule.immediate or t - st.pending_since >= hold:
                        st.fired_since = t
            else:
                st.pending_since = None
                if st.fired_since is not None:
                    if st.false_since is None:
                        st.false_since = t
                    if rule.immediate or t - st.false_since >= clear_after_s:
                        st.fired_since = st.false_since = None
            if st.fired_since is not None and st.verdict is not None:
                v = st.verdict
                severity = v.severity or rule.severity
                bottleneck = v.bottleneck or rule.bottleneck
                out.append(
                    Finding(
                        id=rule.id,
                        severity=severity,
                        bottleneck=bottleneck,
                        summary=v.summary,
                        action=v.action or rule.advice,
                        since=st.fired_since,
                    )
                )
        if len(out) > 1:
            out.sort(key=lambda f: _SEVERITY_RANK.get(f.severity, 2))
        return tuple(out)


def up_engines(ctx: Context) -> Sequence[EngineStats]:
    """The engines the rules judge: up and exporting their figures. (A fleet's replica is one
    engine, and each of its rules asks: that case answers with the Context's own tuple, or
    the empty one, building nothing.)"""
    engines = ctx.engines
    if len(engines) == 1:
        e = engines[0]
        return engines if e.up and not e.stats_disabled else ()
    return [e for e in engines if e.up and not e.stats_disabled]


def where(ctx: Context, e: EngineStats) -> str:
    return f"{e.url}: " if len(ctx.engines) > 1 else ""


def gateways_back(ctx: Context) -> Iterator[tuple[float, GatewayStats | None]]:
    """The watched gateway at each earlier poll, newest first (None: none watched then)."""
    for snap in reversed(ctx.history):
        yield snap.time, snap.gateway


def kv_size_now(ctx: Context, e: EngineStats) -> KvSize | None:
    """`kv_size` at the rules' poll, looking back through their history, at their target."""
    return kv_size(e, ctx.history, ctx.time, ctx.settings.kv_target_frac, kv_maxima=_of(ctx))


def _of(ctx: Context) -> KvMaxima:
    """The pipeline's look-backs, or ones made from the Context's history."""
    if ctx.kv_maxima is not None:
        return ctx.kv_maxima
    return KvMaxima.of_history(ctx.history, ctx.settings.window_s)


def cap_action(n: int | None, why: str, ctx: Context | None = None) -> str:
    """Advice to cap concurrency at ~n, read against the watched gateway (`ctx`): never
    "press -" when vLLM runs more than the gateway has in flight (traffic goes around it, so
    no gateway cap helps) or the gateway's cap is already at or below n (the window still
    holds the time before it)."""
    gw, engines = (ctx.gateway, ctx.engines) if ctx is not None else (None, ())
    if gw is not None and gw.up and n is not None:
        running = sum(e.running or 0.0 for e in engines if e.up)
        # +1: the two are scraped a moment apart, and an admission can fall in between
        if gw.in_flight is not None and running > gw.in_flight + 1:
            return (
                f"{why}: vLLM runs {running:.0f} but the gateway has {gw.in_flight} in flight, "
                "so traffic reaches vLLM around it: point clients at the gateway "
                f"(cap ~{n}), or {_seats(engines, n)}"
            )
        if gw.max_concurrency is not None and gw.max_concurrency <= n:
            return (
                f"{why}, but the gateway cap ({gw.max_concurrency}) is already at or below ~{n}: "
                "this clears once the window has passed the time before the cap"
            )
    if n is None:
        return (
            f"{why}: cap concurrency at the gateway (press - or :cap N, gateway max_concurrency) "
            f"so the excess waits there with a timeout, or {_seats(engines, None)}"
        )
    return (
        f"{why}: cap concurrency at ~{n}: press - or :cap {n} (gateway max_concurrency), "
        f"or {_seats(engines, n)}"
    )


def _seats(engines: Sequence[EngineStats], n: int | None) -> str:
    """The engine's own way to bound its concurrency at `n` (None: lower, no figure to name),
    in its flag's words; vLLM's where the engines are several kinds, none, or of no dialect
    llmtop knows."""
    kinds = {e.engine for e in engines}
    d = BY_KIND.get(kinds.pop() or "") if len(kinds) == 1 else None
    seats = (d or VLLM).seats
    if n is None:  # "with a lower --max-num-seqs": the flag without a figure
        return seats.replace(" {n}", "").replace("with ", "with a lower ", 1)
    return seats.format(n=n)


_CAP_ADVICE = re.compile(r"press - or :cap (\d+)\b")
"""The instruction `cap_action` writes when a lower gateway cap is the fix."""


def suggested_cap(findings: Iterable[Finding]) -> tuple[int, Finding] | None:
    """The cap the findings tell the user to type now, and the finding that says so: read from the
    `:cap N` that `cap_action` writes, so the demo's banner and `--apply-cap auto` follow the
    screen (the most severe such finding, oldest first among equals). None when none advises one:
    nothing is wrong, the gateway cap is at or below it, or traffic goes around the gateway."""
    ranked = sorted(
        findings,
        key=lambda f: (_SEVERITY_RANK.get(f.severity, 2), f.since if f.since is not None else 0.0),
    )
    for f in ranked:
        m = _CAP_ADVICE.search(f.action)
        if m:
            return int(m.group(1)), f
    return None


def kv_peak(ctx: Context, e: EngineStats) -> float | None:
    """Highest KV usage over the window: preemption frees blocks, so a full cache oscillates.
    This poll's, the window's, and at least the previous poll's (its start when polls are a
    window apart)."""
    kv_maxima = _of(ctx)
    since = ctx.time - ctx.settings.window_s
    if kv_maxima.latest is not None:
        since = min(since, kv_maxima.latest)
    found = kv_maxima.kv_usage.most(e.url, since)
    now = e.kv_cache_usage_frac
    if found is None or now is None:
        return now if found is None else found[1]
    return max(now, found[1])


def kv_pressed(ctx: Context, e: EngineStats, peak: float | bool | None = False) -> bool:
    """KV at its high mark within the window, with preemptions or requests waiting.

    `peak`: `kv_peak(ctx, e)` when the caller has it already (False: work it out, only when
    the engine preempts or has requests waiting: the look-back is the costly part)."""
    waiting = e.waiting_capacity if e.waiting_capacity is not None else e.waiting
    if not e.preemptions_per_s and not waiting:
        return False
    if peak is False:
        peak = kv_peak(ctx, e)
    return peak is not None and not peak < ctx.settings.kv_high_frac  # NaN: as `peak < high` had it
