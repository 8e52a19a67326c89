"""The autopilot: moves the gateway's KV budget (max_inflight_kv_blocks) about once a second.

Pure; the app (or bench/bench_autopilot.py) calls `drive` with each scrape's signals
(`core.derive.signals.EngineSignals`, read from vLLM's /metrics by core's reader). A figure
it steps on that is unknown (None: not exported, no interval yet, or no replica could be read)
holds the budget where it is, and the reason on /admin/stats says which.

The budget is in KV blocks, not requests: admission already weighs every request by its
predicted footprint (footprint.py), so one budget holds eight 4,000-token prompts or a hundred
short chats, and a change of mix needs no move at all. The controller only corrects what the
prediction gets wrong, on the engine's explicit congestion signals (docs/autopilot.md says why
these and not a latency gradient):

* preemption (vLLM ran out of KV blocks and threw work away), or requests waiting inside the
  engine for 3 scrapes with its KV cache >= 95 % full: cut to 0.95x of what is in flight, and
  keep that level as a ceiling that is forgotten slowly (0.2 % of the cache a step);
* mean ITL over its SLO, or the engine's TTFT p95 over 0.8x the TTFT SLO: ease 5 %, same ceiling;
* otherwise, with demand (a queue, or the budget nearly used), move toward `overcommit`: past
  the cache by what the share of the footprint actually held (measured) and the number of
  requests sharing it allow; at most +2 % of the cache a step up, at once down; no growth for
  5 s after a cut, and none past the cache before a request has finished lately.

Damping: a move smaller than 2 % of the cache or half a request of the mix is not made, and the
measured held share rises fast but falls slowly, so a steady load settles (W2-W4 in
bench/bench_autopilot.py) instead of sawing; the budget stays within [0.1, 1.5] x the cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmtop.core.derive.signals import EngineSignals
from llmtop.core.base.slo import SloSettings
from llmtop.gateway.admission import AUTOPILOT, AdmissionController

AUTO_MAX_CONCURRENCY = 1024
"""In auto mode max_concurrency is only a ceiling: the KV budget does the admitting."""


@dataclass(frozen=True)
class AutopilotConfig:
    """Defaults are the product: the benchmark runs them on every workload untuned."""

    ttft_slo_s: float = SloSettings.ttft_s
    itl_slo_s: float = SloSettings.itl_s
    kv_target: float = 0.92
    """The KV use the overcommit target aims at (see `overcommit`)."""
    held_gain: float = 0.2
    """Smoothing per step of blocks held per footprint block when it rises (the mix got
    heavier: be careful at once)..."""
    held_gain_down: float = 0.04
    """...and when it falls (lighter: allow more only slowly); the gauge swings with every
    prefill and finish."""
    grow: float = 0.02
    """Most the budget grows in one step, as a share of the cache (down moves are at once)."""
    cut: float = 0.95
    """On preemption or a full cache with a queue inside the engine: this share of what was in
    flight, and a ceiling there..."""
    ease: float = 0.95
    """...on a mean ITL or engine TTFT over its SLO: this share of the budget, same ceiling."""
    ceiling_margin: float = 0.97
    ceiling_forget: float = 0.002
    """The ceiling rises by this share of the cache a step without trouble (~50 s for 10 %)."""
    min_share: float = 0.1
    max_share: float = 1.5
    hold_s: float = 5.0
    waiting_ticks: int = 3
    engine_ttft_share: float = 0.8
    deadband: float = 0.02
    """Moves smaller than this share of the cache, or half a request of the mix, are not made."""


@dataclass(frozen=True)
class Move:
    """One change of the budget and why."""

    old: int | None
    new: int
    reason: str


def overcommit(cap: int, held: float, per_request: float, use: float) -> float:
    """The largest budget whose KV blocks held stay under `use` x the cache with two standard
    deviations to spare, never below the cache.

    n requests of footprint f at independent, uniform stages of their lives hold on average
    held x n f blocks, with a standard deviation of about f (1 - held) / sqrt(3) x sqrt(n)
    (a uniform spread of the held share over [2 held - 1, 1]). Many small requests may go well
    past the cache (200/150 chat: ~1.13x); a few large ones may not (2 of 13 blocks in 32)."""
    h = max(held, 0.2)
    k = use * cap
    c = 2.0 * math.sqrt(per_request) * (1.0 - h) / math.sqrt(3.0)
    x = (-c + math.sqrt(c * c + 4.0 * h * k)) / (2.0 * h)  # x = sqrt(budget)
    return max(float(cap), x * x)


def _blocks(n: float) -> str:
    return f"{n:,.0f}"


Figures = tuple[float, float, float]
"""(preemptions per second, requests waiting, KV use 0..1): what every step reads."""


def required(sig: EngineSignals) -> tuple[Figures | None, list[str]]:
    """The figures every step reads, or None and the names of those unknown."""
    preempt, waiting, kv = sig.preemptions_per_s, sig.waiting, sig.kv_usage_frac
    if preempt is None or waiting is None or kv is None:
        named = (("preemptions", preempt), ("waiting", waiting), ("KV use", kv))
        return None, [name for name, v in named if v is None]
    return (preempt, waiting, kv), []


class Autopilot:
    """The budget's state: a float target, the applied limit, the level that last caused
    trouble (a ceiling it forgets slowly), a hold after cuts, and the measured ratio of KV
    blocks held to footprint blocks in flight."""

    def __init__(self, config: AutopilotConfig | None = None) -> None:
        self.config = config or AutopilotConfig()
        self.target: float | None = None
        self.applied: int | None = None
        self.capacity: int | None = None
        self.ceiling: float | None = None
        self.held: float | None = None
        self._waiting_ticks = 0
        self._hold_until = -math.inf
        self.last_reason = "waiting for the engine's KV capacity (vllm:cache_config_info)"
        self.last_move: Move | None = None
        self.unread: tuple[str, ...] = ()
        """Replicas whose /metrics could not be read this tick (left out of the sums)."""

    def reset(self, applied: int | None) -> None:
        """Take over from a limit set by someone else (mode switched to auto)."""
        self.applied = applied
        self.target = float(applied) if applied is not None else None

    def _trouble(
        self, sig: EngineSignals, figures: Figures, in_flight_blocks: int, lo: float
    ) -> str | None:
        """Cut the target on a congestion signal; the reason, or None when all is well."""
        c = self.config
        assert self.target is not None
        t = self.target
        preempt_per_s, waiting, kv_usage = figures
        self._waiting_ticks = self._waiting_ticks + 1 if waiting >= 1 else 0
        kv = kv_usage if sig.kv_usage_frac_waiting is None else sig.kv_usage_frac_waiting
        full = self._waiting_ticks >= c.waiting_ticks and kv >= 0.95
        if preempt_per_s > 0 or full:
            self.ceiling = float(max(lo, min(t, in_flight_blocks)))
            self.target = self.ceiling * c.cut
            if preempt_per_s > 0:
                return f"preempting {preempt_per_s:.1f}/s"
            return f"{waiting:.0f} waiting in the engine at KV {kv:.0%}"
        why = None
        limit = c.engine_ttft_share * c.ttft_slo_s
        if sig.itl_mean_s is not None and sig.itl_mean_s > c.itl_slo_s:
            why = f"mean ITL {sig.itl_mean_s * 1000:.0f} ms > {c.itl_slo_s * 1000:.0f} ms"
        elif sig.ttft_p95_s is not None and sig.ttft_p95_s > limit:
            why = f"engine TTFT p95 {sig.ttft_p95_s:.1f}s > {limit:.1f}s"
        if why is not None:
            self.ceiling = t
            self.target = t * c.ease
        return why

    def step(
        self,
        now: float,
        sig: EngineSignals,
        *,
        in_flight_blocks: int,
        queued: int,
        in_flight: int = 0,
        turned_over: bool = True,
    ) -> Move | None:
        """One control step; a Move when the applied budget changes. `in_flight` (requests)
        sizes the margin for few large requests; `turned_over` (a request finished lately)
        says the held ratio comes from requests at all stages of their lives, not a burst's
        newcomers that have not grown yet: no overcommit before it."""
        c = self.config
        cap = sig.kv_capacity_blocks
        if cap is None:
            self.last_reason = "no KV capacity in the upstream's /metrics: holding"
            return None
        self.capacity = cap
        lo, hi = max(1.0, c.min_share * cap), c.max_share * cap
        if sig.kv_usage_frac is not None and in_flight_blocks >= 0.2 * cap:
            ratio = min(1.0, sig.kv_usage_frac * cap / in_flight_blocks)
            prev = self.held
            if prev is None:
                self.held = ratio
            else:
                gain = c.held_gain if ratio > prev else c.held_gain_down
                self.held = prev + gain * (ratio - prev)
        if self.target is None or self.applied is None:
            self.target = float(cap)
            return self._apply(round(self.target), f"start at the KV cache: {_blocks(cap)} blocks")
        figures, unknown = required(sig)
        if figures is None:
            self.last_reason = (
                f"holding at {_blocks(self.applied)} blocks: {', '.join(unknown)} unknown "
                "(not in the upstream's /metrics, or no interval yet)"
            )
            return None
        why = self._trouble(sig, figures, in_flight_blocks, lo)
        if why is not None:
            self.target = max(lo, self.target)
            self._hold_until = now + c.hold_s
            new = round(self.target)
            if new < self.applied:
                return self._apply(new, why)
            self.last_reason = f"holding: {why}"
            return None
        if self.ceiling is not None:
            self.ceiling += c.ceiling_forget * cap
            if self.ceiling >= hi:
                self.ceiling = None
        if now < self._hold_until:
            return None
        held = self.held if self.held is not None else 1.0
        per = in_flight_blocks / in_flight if in_flight else None
        want = overcommit(cap, held, per, c.kv_target) if turned_over and per else float(cap)
        top = hi if self.ceiling is None else min(hi, c.ceiling_margin * self.ceiling)
        want = max(lo, min(want, top))
        demand = queued > 0 or in_flight_blocks >= (1 - c.deadband) * self.applied
        # a move smaller than half a request of the current mix changes nothing that fits
        band = max(c.deadband * cap, 0.5 * per) if per else c.deadband * cap
        if want < self.target - band:
            self.target = want  # the mix got heavier: follow it down at once
        elif demand:
            self.target = min(want, self.target + c.grow * cap)
        new = round(self.target)
        if abs(new - self.applied) >= band:
            if new > self.applied:
                why = f"headroom: {held:.0%} of the footprint held, {queued} queued"
            else:
                why = f"heavier mix: {held:.0%} of the footprint held"
            return self._apply(new, why)
        return None

    def _apply(self, new: int, why: str) -> Move:
        old = self.applied
        self.applied = new
        shown = "none" if old is None else _blocks(old)
        self.last_reason = f"KV budget {shown} -> {_blocks(new)} blocks: {why}"
        self.last_move = Move(old, new, self.last_reason)
        return self.last_move

    def status(self, ctl: AdmissionController) -> dict[str, Any]:
        """The autopilot's part of /admin/stats; the budget also as requests of the recent mix."""
        per = ctl.in_flight_kv_blocks / ctl.in_flight if ctl.in_flight else None
        return {
            "budget_blocks": self.applied,
            "capacity_blocks": self.capacity,
            "budget_requests": round(self.applied / per) if per and self.applied else None,
            "reason": self.last_reason
            + (
                f" ({len(self.unread)} replica(s) unread: {', '.join(self.unread)})"
                if self.unread
                else ""
            ),
        }


def drive(
    ctl: AdmissionController,
    pilot: Autopilot,
    sig: EngineSignals | None,
    now: float,
    *,
    unread: str = "no replica",
) -> None:
    """One tick: learn the footprint, and in auto mode step the controller and apply its move.
    `sig` None: no replica's /metrics could be read (`unread` says why); the budget holds."""
    if sig is None:
        pilot.last_reason = f"upstream /metrics unreadable ({unread}): holding"
        ctl.autopilot = pilot.status(ctl)
        return
    if ctl.footprint is not None:
        ctl.footprint.learn(sig.prompt_tokens, sig.output_tokens_hist, sig.kv_block_size)
    lim = ctl.limits
    if lim.mode != "auto":
        pilot.reset(None)
        pilot.last_reason = "manual: the autopilot is off"
        ctl.autopilot = pilot.status(ctl)
        return
    if pilot.applied != lim.max_inflight_kv_blocks:
        pilot.reset(lim.max_inflight_kv_blocks)  # someone else set it while auto: start there
    if lim.max_concurrency < AUTO_MAX_CONCURRENCY:
        ctl.set_limits(
            {"max_concurrency": AUTO_MAX_CONCURRENCY},
            source=AUTOPILOT,
            reason="autopilot on: admits by KV footprint; max_concurrency is only a ceiling",
        )
    move = pilot.step(
        now,
        sig,
        in_flight_blocks=ctl.in_flight_kv_blocks,
        queued=ctl.queued,
        in_flight=ctl.in_flight,
        turned_over=bool(ctl.drain_rate()),
    )
    if move is not None:
        ctl.set_limits({"max_inflight_kv_blocks": move.new}, source=AUTOPILOT, reason=move.reason)
    ctl.autopilot = pilot.status(ctl)


__all__ = [
    "AUTO_MAX_CONCURRENCY",
    "Autopilot",
    "AutopilotConfig",
    "Move",
    "drive",
]
