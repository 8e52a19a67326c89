"""The vocabulary of the health rules: what a rule sees (`Context`), what it says (`Verdict`),
and what it is (`Rule`), plus helpers the rule modules share. Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from llmtop.core import format as fmt
from llmtop.core.peaks import HeldPeaks, HistoryIndex, held_tokens
from llmtop.core.quickinit import quick_init
from llmtop.core.snapshot import (
    Bottleneck,
    EngineStats,
    Finding,
    GatewayStats,
    GpuStats,
    Severity,
    Snapshot,
    WordedOnRead,
    Wording,
)
from llmtop.core.thresholds import HealthSettings

X = TypeVar("X")
"""What a rule sees: an engine's `Context`, or the fleet's view."""


@quick_init
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
    history_index: HistoryIndex | None = None
    """The look-backs over `history`, kept by the pipeline (the rules scan without it)."""


@quick_init
@dataclass(frozen=True)
class Verdict(WordedOnRead):
    """A rule that holds: the evidence and the fix, with optional overrides of the rule's class."""

    summary: str
    action: str
    severity: Severity | None = None
    bottleneck: Bottleneck | None = None

    @classmethod
    def later(
        cls,
        wording: Wording,
        inputs: tuple[Any, ...],
        severity: Severity | None = None,
        bottleneck: Bottleneck | None = None,
    ) -> Verdict:
        """A verdict worded when first read (its finding's words: `WordedOnRead`)."""
        return cls._later(wording, inputs, severity=severity, bottleneck=bottleneck)


@dataclass(frozen=True)
class Rule(Generic[X]):
    """One health rule: an id, its default class, and a pure check of what it sees (`Context`
    for an engine's rules, the fleet's view for the fleet rules)."""

    id: str
    severity: Severity
    bottleneck: Bottleneck
    check: Callable[[X], Verdict | None]
    immediate: bool = False
    """Fire and clear without hysteresis (the fact itself is not noisy: a target is down)."""


@dataclass
class _Held:
    pending_since: float | None = None
    fired_since: float | None = None
    false_since: float | None = None
    verdict: Verdict | None = None


class Hysteresis(Generic[X]):
    """A check must hold `fire_after_s` to fire and stay false `clear_after_s` to clear
    (immediate rules at once), so one noisy poll neither raises nor drops a finding. One home
    for the engine rules (`health.HealthState`) and the fleet rules (`rules_fleet.FleetHealth`)."""

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
                    if rule.immediate or t - st.pending_since >= fire_after_s:
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
                pending, since = v.pending_words(), st.fired_since
                if pending is not None:  # handed on, not worded
                    out.append(Finding.later(rule.id, severity, bottleneck, *pending, since))
                else:
                    out.append(
                        Finding(
                            id=rule.id,
                            severity=severity,
                            bottleneck=bottleneck,
                            summary=v.summary,
                            action=v.action,
                            since=since,
                        )
                    )
        if len(out) > 1:
            out.sort(key=lambda f: 0 if f.severity == "critical" else 1)
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


KV_TARGET_FRAC = HealthSettings.kv_target_frac
"""The default share of the cache `kv_size` fills (callers without settings: the what-if)."""

SIZE_LOOKBACK_S = 60.0
"""How far back `kv_size` looks for the most KV a running sequence held: long enough to span
a long prompt's life (its prefill, its answer), so one wave of them finishing does not make a
few short chats the measure of a slot."""


@quick_init
@dataclass(frozen=True)
class KvHeld:
    """What each running sequence held at one poll: usage x capacity / running."""

    usage_frac: float
    running: float
    tokens: float
    ago_s: float


_BUDGETS: dict[tuple[int, float], str] = {}
"""(capacity, target) -> `KvSize.budget`'s text: kv-exhausted states it for every full
replica at every poll, and it changes only with the cache size or the target."""
_BUDGETS_KEPT = 256


@quick_init
@dataclass(frozen=True)
class KvSize:
    """What one concurrency slot costs in KV tokens, and how many slots the cache holds."""

    capacity_tokens: int
    block_size: int | None
    prompt_tokens: float | None
    """Mean prompt of the requests that finished in the window (None before any did)."""
    output_tokens: float | None
    held: KvHeld | None
    """The most a running sequence held over `SIZE_LOOKBACK_S` (None when nothing ran)."""
    per_request_tokens: float
    fits: int
    target_frac: float
    """The share of the cache the count may fill (HealthSettings.kv_target_frac)."""

    def inputs(self) -> tuple[Any, ...]:
        """Its fields as one flat tuple of plain numbers (`held`'s four in its place, None when
        there is none): what a finding worded later keeps instead of the object. Flat, the
        garbage collector stops tracking it at its first collection. `of_inputs` makes it."""
        h = self.held
        held = (None,) * 4 if h is None else (h.usage_frac, h.running, h.tokens, h.ago_s)
        return (
            self.capacity_tokens,
            self.block_size,
            self.prompt_tokens,
            self.output_tokens,
            *held,
            self.per_request_tokens,
            self.fits,
            self.target_frac,
        )

    @classmethod
    def of_inputs(cls, inputs: Sequence[Any]) -> KvSize:
        """The KvSize whose `inputs` these are."""
        capacity, block, prompt, output, usage, running, tokens, ago = inputs[:8]
        per_request, fits, target = inputs[8:]
        held = None if usage is None else KvHeld(usage, running, tokens, ago)
        return cls(capacity, block, prompt, output, held, per_request, fits, target)

    @property
    def budget_tokens(self) -> int:
        """The KV tokens the count divides: the capacity at the target fill, whole tokens."""
        return math.floor(self.capacity_tokens * self.target_frac)

    @property
    def by_held(self) -> bool:
        """Sized by what running sequences held (larger than the finished requests' mean)."""
        return self.held is not None and self.per_request_tokens == math.ceil(self.held.tokens)

    def basis(self) -> str:
        """Where the size per request comes from: the mean, or what running sequences held."""
        if self.by_held and self.held is not None:
            h = self.held
            when = "now" if h.ago_s < 0.5 else f"{h.ago_s:.0f} s ago"
            share = f"{h.usage_frac * 100:.1f}%"  # to a tenth: whole percents can move a block
            held = f"{share} of the cache held by {fmt.count(h.running)} running"
            return f"{held} {when}"
        return f"{fmt.count(self.prompt_tokens)} prompt + {fmt.count(self.output_tokens)} output"

    def budget(self) -> str:
        """The tokens divided, with the capacity and target they come from."""
        key = (self.capacity_tokens, self.target_frac)
        text = _BUDGETS.get(key)
        if text is None:
            text = (
                f"{fmt.count(self.budget_tokens)} KV tokens ({self.target_frac * 100:g}% target "
                f"of {fmt.count(self.capacity_tokens)})"
            )
            # Cached only for positive inputs: equal keys then print alike (0.0 and -0.0,
            # equal as keys, would not), and a fleet has a few cache sizes, not thousands.
            if self.capacity_tokens > 0 and self.target_frac > 0:
                if len(_BUDGETS) >= _BUDGETS_KEPT:
                    _BUDGETS.clear()
                _BUDGETS[key] = text
        return text

    def division(self) -> str:
        """Budget / size per request, in blocks when known: the sum behind `fits`."""
        blocks = f" in {self.block_size}-token blocks" if self.block_size else ""
        return f"{self.budget()} / {fmt.count(self.per_request_tokens)} tokens per request{blocks}"

    def arithmetic(self) -> str:
        """The sum that gives `fits` with its inputs, so the printed figures produce it."""
        blocks = f" in {self.block_size}-token blocks" if self.block_size else ""
        return (
            f"{self.budget()} / {fmt.count(self.per_request_tokens)} "
            f"tokens per request ({self.basis()}){blocks} = {self.fits} sequences fit"
        )


def _held(
    e: EngineStats,
    history: Sequence[Snapshot],
    now: float | None,
    index: HeldPeaks | None = None,
) -> KvHeld | None:
    """The most KV per running sequence at this poll and the earlier ones of the lookback
    (this poll first, then newest to oldest: the first of equals wins). `index`, kept by the
    pipeline over `history`, answers for the look-back where it is exact."""
    best: tuple[float, float, float] | None = None  # usage, running, ago
    most = 0.0
    mine = held_tokens(e)
    if mine is not None:
        best, most = (mine[0], mine[1], 0.0), mine[2]
    if now is None:
        pass
    elif index is not None and index.exact(e.url, now):
        found = index.most(e.url, now, SIZE_LOOKBACK_S)
        if found is not None and (best is None or found[2] > most):
            best, most = (found[0], found[1], now - found[3]), found[2]
    else:
        url, oldest = e.url, now - SIZE_LOOKBACK_S
        for snap in reversed(history):
            if snap.time < oldest:
                break
            for p in snap.engines:
                if p.url != url or not p.up:
                    continue
                held = held_tokens(p)
                if held is not None and (best is None or held[2] > most):
                    best, most = (held[0], held[1], now - snap.time), held[2]
    if best is None:
        return None
    return KvHeld(best[0], best[1], most, max(0.0, best[2]))


def kv_size(
    e: EngineStats,
    history: Sequence[Snapshot] = (),
    now: float | None = None,
    target_frac: float = KV_TARGET_FRAC,
    *,
    index: HeldPeaks | None = None,
) -> KvSize | None:
    """What a sequence costs in KV and how many fit: the one sizing every rule and panel uses.

    A slot costs the larger of two figures. The mean prompt + output of the requests that
    finished in the window counts each request once, but a cap is filled by whatever is running,
    and long prompts run longest. In the recorded demo story (8 chats beside 24 x 4,000-token
    prompts) the window's mean fell under 1,000 tokens (a cap of 39) while each running sequence
    held ~4,200 (9 fit); in `demo --scenario quick` the mean's cap of 11 left the cache at
    88-93% with a request always waiting for memory. The KV each running sequence actually
    held (usage x capacity / running, the most over the last `SIZE_LOOKBACK_S` at any poll)
    weighs requests by how long they stay.
    The larger wins: a sequence still writing its answer holds less than it will, so neither
    overstates what the traffic seen costs. (A high quantile of vLLM's request_prompt_tokens
    histogram was the other way: its buckets go 1-2-5, so 4,000-token prompts land in
    (2,000, 5,000] and an interpolated p95 says ~4,850, a cap of 7 where 9 fit.) The size used
    is printed with its inputs (`arithmetic`), so the figures next to a finding give its number.
    vLLM allocates whole blocks and keeps one back (the null block), so with the block size
    known the count is (blocks - 1) / ceil(tokens per request / block size): with 128-token
    blocks and 1,000-token requests the token-only count said 4, and a cap of 4 still preempted
    on a real vLLM 0.32 while 3 did not. Without a block size: capacity / tokens.
    Either way the capacity is first taken at `target_frac` (HealthSettings.kv_target_frac):
    the exact quotient leaves no room for requests longer than the size, answers still
    growing or vLLM's watermark of free blocks, and in `demo --scenario quick` a cap at it (10)
    kept a request waiting for blocks at 92-94% KV, so the findings that suggested it never
    cleared. None when the capacity is unknown or nothing has run or finished.
    """
    cap = e.kv_capacity_tokens
    if cap is None or not math.isfinite(cap) or cap <= 0:
        return None
    held = _held(e, history, now, index)
    mean = (
        e.mean_prompt_tokens + (e.mean_generation_tokens or 0.0)
        if e.mean_prompt_tokens is not None
        else None
    )
    candidates = [
        v
        for v in (mean, held.tokens if held else None)
        if v is not None and v > 0 and math.isfinite(v)  # a NaN or 1e309 figure sizes nothing
    ]
    if not candidates:
        return None
    per_req = math.ceil(max(candidates))  # whole tokens, as printed: the figures give `fits`
    target = min(1.0, target_frac) if target_frac > 0 else 1.0
    budget = math.floor(cap * target)
    block = e.kv_block_size
    if block and block > 0:
        fits = max(1, (budget // block - 1) // math.ceil(per_req / block))
    else:
        fits = max(1, math.floor(budget / per_req))
    prompt = e.mean_prompt_tokens if mean is not None else None
    output = e.mean_generation_tokens if mean is not None else None
    return KvSize(cap, block, prompt, output, held, per_req, fits, target)


def kv_size_now(ctx: Context, e: EngineStats) -> KvSize | None:
    """`kv_size` at the rules' poll, looking back through their history, at their target."""
    index = ctx.history_index.held if ctx.history_index is not None else None
    return kv_size(e, ctx.history, ctx.time, ctx.settings.kv_target_frac, index=index)


def kv_fit(
    e: EngineStats,
    history: Sequence[Snapshot] = (),
    now: float | None = None,
    target_frac: float = KV_TARGET_FRAC,
) -> int | None:
    """Sequences that fit in the KV cache (`kv_size`); None when unknown."""
    size = kv_size(e, history, now, target_frac)
    return size.fits if size is not None else None


def cap_action(n: int | None, why: str, ctx: Context | None = None) -> str:
    """Advice to cap concurrency at ~n, read against the watched gateway (in `ctx`).

    Two cases where "press -" would be wrong: vLLM runs more than the gateway has in flight
    (traffic reaches it around the gateway, so no gateway cap can help), and the gateway's cap
    is already at or below n (seconds after `:cap`, the window still holds what came before).
    """
    if ctx is None or ctx.gateway is None:
        return cap_advice(n, why)
    return cap_advice(n, why, ctx.gateway, running_total(ctx.engines))


def running_total(engines: Iterable[EngineStats]) -> float:
    """The sequences the engines that answer run (what `cap_advice` weighs the gateway's
    in-flight against)."""
    return sum(e.running or 0.0 for e in engines if e.up)


def cap_advice(
    n: int | None, why: str, gw: GatewayStats | None = None, running: float = 0.0
) -> str:
    """`cap_action` from the two things of a `Context` it reads, the gateway and what the
    engines run (what a finding worded later keeps, rather than the Context)."""
    if gw is not None and gw.up and n is not None:
        # +1: the two are scraped a moment apart, and an admission can fall in between
        if gw.in_flight is not None and running > gw.in_flight + 1:
            return (
                f"{why}: vLLM runs {running:.0f} but the gateway has {gw.in_flight} in flight, "
                "so traffic reaches vLLM around it: point clients at the gateway "
                f"(cap ~{n}), or restart vLLM with --max-num-seqs {n}"
            )
        if gw.max_concurrency is not None and gw.max_concurrency <= n:
            return (
                f"{why}, but the gateway cap ({gw.max_concurrency}) is already at or below ~{n}: "
                "this clears once the window has passed the time before the cap"
            )
    if n is None:
        return (
            f"{why}: cap concurrency at the gateway (press - or :cap N, gateway max_concurrency) "
            "so the excess waits there with a timeout, or restart vLLM with a lower --max-num-seqs"
        )
    return (
        f"{why}: cap concurrency at ~{n}: press - or :cap {n} (gateway max_concurrency), "
        f"or restart vLLM with --max-num-seqs {n}"
    )


_CAP_ADVICE = re.compile(r"press - or :cap (\d+)\b")
"""The instruction `cap_action` writes when a lower gateway cap is the fix."""
_SEVERITY_RANK = {"critical": 0, "warning": 1}


def suggested_cap(findings: Iterable[Finding]) -> tuple[int, Finding] | None:
    """The cap the findings tell the user to type now, and the finding that says so.

    Read from the action itself (the `:cap N` that `cap_action` writes), so the demo's banner
    and `--apply-cap auto` follow exactly what the screen shows: the most severe finding that
    advises a cap, the oldest first among equals (the order the screen lists them). None when
    none does: nothing is wrong, the gateway cap is already at or below the suggestion, or
    traffic goes around the gateway.
    """
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

    The pipeline's `history_index` answers for the look-back where it is exact (`KvPeaks`);
    `max` of this poll's value and its answer is the scan's, this poll first among equals."""
    now = e.kv_cache_usage_frac
    url, oldest = e.url, ctx.time - ctx.settings.window_s
    if ctx.history_index is not None:
        exact, before = ctx.history_index.kv.peak(url, oldest)
        if exact:
            if before is None or now is None:
                return now if before is None else before
            return max(now, before)
    values = [now]
    for i, snap in enumerate(reversed(ctx.history)):
        # The window, and at least the previous poll (its start when polls are a window apart).
        if i > 0 and snap.time < oldest:
            break
        for p in snap.engines:
            if p.url == url and p.up:
                values.append(p.kv_cache_usage_frac)
    known = [v for v in values if v is not None]
    return max(known) if known else None


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
