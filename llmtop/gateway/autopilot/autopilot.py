"""The autopilot, pure: once a second or so `drive` moves the gateway's two budgets to serve the
most requests within the SLO (docs/autopilot.md: how, and why not a latency gradient). The prefill
budget is `prefill_horizon_s` of the measured prefill rate (TTFT near a lone request's); the KV
budget takes the largest of the safe overcommit, the peak in flight and the engine's room, probes
while SLO goodput rises, backs off on engine trouble. An unknown figure (None) holds both."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmtop.core.derive.signals import EngineSignals
from llmtop.gateway.admission.controller import AdmissionController
from llmtop.gateway.autopilot.config import AutopilotConfig
from llmtop.gateway.autopilot.engines import kv_words
from llmtop.gateway.autopilot.readings import Figures, felt_by_users, overcommit, required
from llmtop.gateway.autopilot.slots import Slots
from llmtop.gateway.autopilot.status import autopilot_status, blocks_text


@dataclass(frozen=True)
class Move:
    """One change of the budget and why."""

    old: int | None
    new: int
    reason: str


_blocks = blocks_text
DRAINING = "; the last cut still draining"


class Autopilot:
    """The budgets' state: the KV budget's float target and applied limit, the level that last
    failed (a ceiling it forgets slowly), a hold after cuts, the probe's last step and the
    served-within-SLO rate before it, the measured ratio of KV blocks held to footprint blocks
    in flight, and the prefill budget applied."""

    def __init__(self, config: AutopilotConfig | None = None) -> None:
        self.config = config or AutopilotConfig()
        self.target: float | None = None
        self.applied: int | None = None
        self.capacity: int | None = None
        self.ceiling: float | None = None
        self.held: float | None = None
        self._waiting_ticks = 0
        self._slow_ticks = 0
        self._thrash_ticks = 0
        self._hold_until = -math.inf
        self._rebase = False
        self.gain = 1.0
        """The KV budget's aim as a multiple of the safe overcommit, moved by the probe."""
        self._period: tuple[float, float, float] | None = None
        """The level being judged since: (when, requests finished, served within SLO)."""
        self._probe: tuple[float, float] | None = None
        """The last probe step not yet judged: (the gain before it, served within SLO per
        second at that gain)."""
        self._peak_share: float | None = None
        self._room: float | None = None
        """The budget the engine's measured room allows this step (None: not known or not calm)."""
        self._kv_use = 0.0
        self.advisory = False
        """Mode advise: `applied` is the suggestion, not the limit in force, so no probe (a
        level not in force cannot be judged)."""
        self.prefill_applied: int | None = None
        self.prefill_reason = "measuring the prefill rate: one new prompt at a time"
        self.last_reason = "waiting for the engine's KV capacity (vllm:cache_config_info)"
        self.last_move: Move | None = None
        self.unread: tuple[str, ...] = ()
        """Replicas whose /metrics could not be read this tick (left out of the sums)."""
        self.slots = Slots()
        """The cap by slots, for an engine that exports no KV figure (`drive`)."""
        self.engine: str | None = None
        """The engine's kind as its /metrics were read (sglang, llamacpp; `drive`'s)."""
        self.reads = "not read yet"
        """How it reads that engine (engines.reads), for /admin/stats."""

    def reset(self, applied: int | None) -> None:
        """Take over from a limit set by someone else (mode switched to auto)."""
        self.applied = applied
        self.target = float(applied) if applied is not None else None
        self._probe = self._period = None
        self.gain = 1.0
        self._rebase = applied is not None
        """The gain is re-read from the budget taken over at the next step."""

    # -- the prefill budget ----------------------------------------------------------------------

    def prefill_budget(self, rate: float | None, backlog: int) -> int | None:
        """The prefill budget for the measured rate (prompt tokens per busy second); a new
        value only when it drifted past the deadband. Before a rate: 1 token, which admits a
        prompt only when nothing is left to prefill (one at a time until the first answers)."""
        c = self.config
        if rate is None:
            want = 1
            self.prefill_reason = "measuring the prefill rate: one new prompt at a time"
        else:
            want = max(1, round(rate * c.prefill_horizon_s))
            self.prefill_reason = (
                f"{_blocks(rate)} prompt tok/s prefilled x {c.prefill_horizon_s:g}s;"
                f" {_blocks(backlog)} tokens not yet prefilled"
            )
        old = self.prefill_applied
        if old is not None and abs(want - old) <= c.prefill_deadband * max(old, 1):
            return None
        self.prefill_applied = want
        return want

    # -- the KV budget ---------------------------------------------------------------------------

    def _trouble(
        self,
        sig: EngineSignals,
        figures: Figures,
        in_flight_blocks: int,
        lo: float,
        finished_per_s: float | None,
    ) -> str | None:
        """Cut the target on real trouble; the reason, or None when all is well."""
        c = self.config
        assert self.target is not None
        t = self.target
        preempt_per_s = figures[0]
        why = None
        limit = c.engine_ttft_share * c.ttft_slo_s
        itl = sig.itl_mean_s if sig.itl_mean_s is not None else 0.0
        slow = itl > c.itl_slo_s
        self._slow_ticks = self._slow_ticks + 1 if slow else 0
        if slow and self._slow_ticks >= c.slow_ticks:  # not one prefill's stall: sustained
            why = f"mean ITL {itl * 1000:.0f} ms > {c.itl_slo_s * 1000:.0f} ms"
        elif sig.ttft_p95_s is not None and sig.ttft_p95_s > limit:
            why = f"engine TTFT p95 {sig.ttft_p95_s:.1f}s > {limit:.1f}s"
        if why is not None:  # an SLO missed inside the engine: ease, the ceiling here
            self.ceiling = t
            self.target = t * c.ease
            self._probe = self._period = None
            return why
        felt = felt_by_users(
            itl, sig.ttft_p95_s, c.thrash_felt * c.itl_slo_s, c.thrash_felt * limit
        )
        thrash = felt is not None and preempt_per_s > c.thrash * max(finished_per_s or 0.0, 0.1)
        self._thrash_ticks = self._thrash_ticks + 1 if thrash else 0
        if thrash and self._thrash_ticks >= c.thrash_ticks:
            done = finished_per_s or 0.0
            why = f"thrashing: preempting {preempt_per_s:.1f}/s, {done:.1f}/s finishing, {felt}"
            if in_flight_blocks > t:  # the last cut has not drained yet: no 4 cuts for one storm
                return f"{why}{DRAINING}"
            floor = float(self.capacity or lo)  # at footprints within the cache, nothing to undo
            self.ceiling = max(floor, float(min(t, in_flight_blocks)))
            self.target = max(floor, self.ceiling * c.cut)
            self._probe = self._period = None
        return why

    def _full(self, figures: Figures, sig: EngineSignals, in_flight_blocks: int) -> str | None:
        """The engine queues inside at a full cache (3 scrapes): more admitted would only wait
        there, out of sight. Hold at what it runs (a ceiling), without a cut."""
        c = self.config
        _, waiting, kv_usage = figures
        self._waiting_ticks = self._waiting_ticks + 1 if waiting >= 1 else 0
        kv = kv_usage if sig.kv_usage_frac_waiting is None else sig.kv_usage_frac_waiting
        if self._waiting_ticks < c.waiting_ticks or kv < 0.95:
            return None
        assert self.target is not None
        level = max(float(in_flight_blocks), c.min_share * (self.capacity or 1))
        self.ceiling = level if self.ceiling is None else min(self.ceiling, level)
        self.target = min(self.target, level)
        self._probe = self._period = None
        return f"{waiting:.0f} waiting in the engine at KV {kv:.0%}: holding at what it runs"

    def step(
        self,
        now: float,
        sig: EngineSignals,
        *,
        in_flight_blocks: int,
        queued: int,
        in_flight: int = 0,
        turned_over: bool = True,
        finished_per_s: float | None = None,
        finished_total: float = 0.0,
        served_total: float = 0.0,
        peak_share: float | None = None,
        room_blocks: float | None = None,
    ) -> Move | None:
        """One control step of the KV budget; a Move when the applied budget changes. `in_flight`
        sizes the margin for few large requests; `turned_over` (one finished lately): the held ratio
        spans all stages of life, so overcommit may start; `finished_total`, `served_total` (within
        the TTFT SLO): what a probe must not lower; `peak_share` (admission's lifetimes): a burst's
        overcommit before it turns over; `room_blocks`: drive.room_blocks."""
        self._peak_share = peak_share
        self._room, self._kv_use = room_blocks, sig.kv_usage_frac or 0.0
        c = self.config
        cap = sig.kv_capacity_blocks
        if cap is None:
            self.last_reason = "no KV capacity in the upstream's /metrics: holding"
            return None
        self.capacity = cap
        lo, hi = max(1.0, c.min_share * cap), c.max_share * cap
        self._learn_held(sig, cap, in_flight_blocks)
        if self.target is None or self.applied is None:
            self.target = float(cap)
            pool = kv_words(self.engine) if self.engine not in (None, "vllm") else ""
            of = f", read from {pool}" if pool else ""
            start = f"start at the KV cache: {_blocks(cap)} blocks{of}"
            return self._apply(round(self.target), start)
        figures, unknown = required(sig)
        if figures is None:
            self.last_reason = (
                f"holding at {_blocks(self.applied)} blocks: {', '.join(unknown)} unknown "
                "(not in the upstream's /metrics, or no interval yet)"
            )
            return None
        why = self._trouble(sig, figures, in_flight_blocks, lo, finished_per_s)
        if why is not None:
            self.target = max(lo, self.target)
            if not why.endswith(DRAINING):  # a new cut: nothing grows for hold_s
                self._hold_until = now + c.hold_s
            new = round(self.target)
            if new < self.applied:
                return self._apply(new, why)
            self.last_reason = f"holding: {why}"
            return None
        full = self._full(figures, sig, in_flight_blocks)
        if self.ceiling is not None:
            self.ceiling += c.ceiling_forget * cap
            if self.ceiling >= hi:
                self.ceiling = None
        if full is not None:
            new = round(max(lo, self.target))
            if new < self.applied - self._band(cap, in_flight_blocks, in_flight):
                return self._apply(new, full)
            self.last_reason = f"KV budget {_blocks(self.applied)} blocks: {full}"
            return None
        if now < self._hold_until:
            return None
        return self._seek(
            now,
            cap,
            lo,
            hi,
            in_flight_blocks,
            queued,
            in_flight,
            turned_over,
            (finished_total, served_total),
        )

    def calm(self, sig: EngineSignals) -> bool:
        """No trouble in sight: no thrash or slow ITL counting, the engine's TTFT p95 within
        its share of the SLO."""
        c = self.config
        if self._thrash_ticks or self._slow_ticks:
            return False
        return sig.ttft_p95_s is None or sig.ttft_p95_s <= c.engine_ttft_share * c.ttft_slo_s

    def _learn_held(self, sig: EngineSignals, cap: int, in_flight_blocks: int) -> None:
        if sig.kv_usage_frac is None or in_flight_blocks < 0.2 * cap:
            return
        ratio = min(1.0, sig.kv_usage_frac * cap / in_flight_blocks)
        prev = self.held
        if sig.kv_usage_frac >= 0.99 and prev is not None and ratio < prev:
            return  # a full cache says only "at least this much held": a heavier mix, never lighter
        if prev is None:
            self.held = ratio
        else:
            gain = self.config.held_gain if ratio > prev else self.config.held_gain_down
            self.held = prev + gain * (ratio - prev)

    def _band(self, cap: int, in_flight_blocks: int, in_flight: int) -> float:
        """A move smaller than this changes nothing that fits: 2 % of the cache or half a
        request of the current mix."""
        per = in_flight_blocks / in_flight if in_flight else None
        return max(self.config.deadband * cap, 0.5 * per) if per else self.config.deadband * cap

    def _seek(
        self,
        now: float,
        cap: int,
        lo: float,
        hi: float,
        in_flight_blocks: int,
        queued: int,
        in_flight: int,
        turned_over: bool,
        counts: tuple[float, float],
    ) -> Move | None:
        """No trouble: toward `gain` x the safe overcommit (up by a step at a time, down at
        once: a heavier mix is followed), and the gain probed upward while served within the
        SLO does not fall; a probe step that lowered it is taken back."""
        c = self.config
        assert self.target is not None
        assert self.applied is not None
        held = self.held if self.held is not None else 1.0
        per = in_flight_blocks / in_flight if in_flight else None
        safe = overcommit(cap, held, per, c.kv_target) if turned_over and per else float(cap)
        peak = self._peak_share
        if peak and per:  # the in-flight set's own predicted peak allows more
            safe = max(safe, c.peak_use * cap / peak)
        top = hi if self.ceiling is None else min(hi, self._below(self.ceiling, cap))
        room = self._room
        roomy = room is not None and room > safe and not self._thrash_ticks and not self._slow_ticks
        if roomy and room is not None:  # the engine's own room: the level it would start now
            safe = min(room, max(top, safe))
        if self._rebase:
            self._rebase = False
            self.gain = max(1.0, self.target / safe)
        full = in_flight_blocks + (per or 0.0) > self.applied  # the next of the mix waits
        demand = queued > 0 or full or in_flight_blocks >= (1 - c.deadband) * self.applied
        band = self._band(cap, in_flight_blocks, in_flight)
        step = max(c.grow * cap, per or 0.0)
        why = ""
        rate = None if self.advisory else self._judge(now, counts)  # advice: no probe
        if rate is not None:
            probe, self._probe = self._probe, None
            if probe is not None and rate < c.good_rise * probe[1]:
                # this level served no more within the SLO than the one before: back there
                self.ceiling = self.gain * safe
                self.gain = probe[0]
                why = f"probe taken back: served within SLO {rate:.2f}/s, {probe[1]:.2f}/s before"
            elif (
                demand
                and rate > 0  # nothing served within the SLO: no evidence a step helps
                and self.target >= self.gain * safe - band
                and self.gain * safe + step <= top
            ):
                self._probe = (self.gain, rate)
                self.gain += step / safe
                why = f"probing up: {queued} queued, served within SLO {rate:.2f}/s"
        want = max(lo, min(self.gain * safe, top))
        if want < self.target:
            self.target = want  # heavier mix, a probe taken back, or under a ceiling
            why = why or f"heavier mix: {held:.0%} of the footprint held"
        elif demand and want > self.target:
            # up to the safe level at once (what the engine would start now), past it a step
            self.target = max(min(want, self.target + step), min(want, safe))
            why = why or (
                f"room in the engine: KV {self._kv_use:.0%} used, {queued} queued"
                if roomy
                else f"headroom: {held:.0%} of the footprint held, {queued} queued"
            )
        new = round(self.target)
        back_to_safe = new < self.applied and new <= round(safe)  # never stay above the safe
        moved = abs(new - self.applied) >= band or why.startswith("prob") or back_to_safe
        if new != self.applied and moved:  # a target set at a step the deadband held back
            kind = "headroom" if new > self.applied else "heavier mix"
            why = why or f"{kind}: {held:.0%} of the footprint held, {queued} queued"
            return self._apply(new, why)
        return None

    def _below(self, ceiling: float, cap: int) -> float:
        """How high the target may go under a ceiling: a margin below it, but never below the
        cache for a ceiling at or above it (footprints within the cache cannot preempt)."""
        top = self.config.ceiling_margin * ceiling
        return max(top, float(cap)) if ceiling >= cap else top

    def _judge(self, now: float, counts: tuple[float, float]) -> float | None:
        """Served within the SLO per second at the level in force, once it has been held long
        enough to tell (probe_every_s and period_finished requests); a new period starts."""
        c = self.config
        finished, served = counts
        period = self._period
        if period is None:
            self._period = (now, finished, served)
            return None
        t0, finished0, served0 = period
        if now - t0 < c.probe_every_s or finished - finished0 < c.period_finished:
            return None
        self._period = (now, finished, served)
        return (served - served0) / (now - t0)

    def _apply(self, new: int, why: str) -> Move:
        old = self.applied
        self.applied = new
        shown = "none" if old is None else _blocks(old)
        self.last_reason = f"KV budget {shown} -> {_blocks(new)} blocks: {why}"
        self.last_move = Move(old, new, self.last_reason)
        return self.last_move

    def status(self, ctl: AdmissionController) -> dict[str, Any]:
        """The autopilot's part of /admin/stats (gateway/autopilot/status.py)."""
        return autopilot_status(self, ctl)


__all__ = ["Autopilot", "AutopilotConfig", "Move", "overcommit"]
