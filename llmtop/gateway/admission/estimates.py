"""What admission predicts from: how fast admitted work drains (requests and KV blocks finished,
prompt tokens prefilled, per second) and the engine's time to a first token once a request reaches
it. They feed a 429's Retry-After, the deadline queue's predicted start and TTFT budget, and the
autopilot's "turned over" signal and prefill budget. Pure: every method takes `now`."""

from __future__ import annotations

import math

from llmtop.gateway.admission.lifetimes import Lifetimes
from llmtop.gateway.admission.window import RateWindow

DRAIN_WINDOW_S = 10
"""Seconds of completions the drain rates (requests, KV blocks freed per second) span."""
ENGINE_TTFT_GAIN = 0.1
"""Smoothing of the engine-side TTFT estimate per sample (about the last 10 first tokens)."""
UNKNOWN_DRAIN_RETRY_S = 5.0
"""Retry-After when no request has completed recently (no drain rate to estimate from)."""
PREFILL_WINDOW_S = 20.0
"""Time constant of the prefill rate: older busy time and tokens weigh e^-1 after this long."""
MIN_BUSY_S = 0.02
"""Busy time below which no prefill rate is claimed."""


class BusyRate:
    """Work done per second of busy time, both decayed over PREFILL_WINDOW_S: a rate of what
    the engine can do, not of what it was given (an idle engine does little because it is given
    little). The caller says how much of the time that passed was busy."""

    __slots__ = ("_busy_s", "_t", "_work")

    def __init__(self) -> None:
        self._t: float | None = None
        self._busy_s = 0.0
        self._work = 0.0

    def advance(self, now: float, busy_s: float) -> None:
        """Time passes up to `now`, `busy_s` of it busy."""
        t = self._t
        self._t = now
        if t is None or now <= t:
            self._busy_s += max(0.0, busy_s)
            return
        keep = math.exp(-(now - t) / PREFILL_WINDOW_S)
        self._work *= keep
        self._busy_s = self._busy_s * keep + max(0.0, busy_s)

    def add(self, work: float) -> None:
        """Work finished (call `advance` first)."""
        self._work += work

    def rate(self) -> float | None:
        """Work per busy second; None before enough has been measured."""
        if self._busy_s < MIN_BUSY_S or self._work <= 0:
            return None
        return self._work / self._busy_s


class PrefillRate(BusyRate):
    """Prompt tokens the engine prefills per second while it has this gateway's prompts to
    prefill: the prompt tokens whose first token came, over the time some admitted prompt waited
    for one. Counted over the busy time, not per request, so batching does not fool it (ten prompts
    prefilled in one step count in that step's time); it falls when the engine is slowed by anything
    (a full cache), which is right: it is the rate at which a new prompt gets its first token."""

    __slots__ = ()

    def pass_time(self, now: float, backlog: int) -> None:
        """Time passes up to `now` with `backlog` prompt tokens (> 0: busy) waiting all along."""
        t = self._t
        self.advance(now, (now - t) if t is not None and backlog > 0 else 0.0)

    def prefilled(self, tokens: int) -> None:
        """A prompt of `tokens` got its first token (call `pass_time` first)."""
        self.add(tokens)


class Estimates:
    """The recent drain rates and the engine-side TTFT, updated as requests finish."""

    __slots__ = (
        "_drain",
        "_drain_blocks",
        "_good",
        "engine_ttft_s",
        "finished_total",
        "lifetimes",
        "prefill",
        "served_total",
    )

    def __init__(self) -> None:
        self._drain = RateWindow(DRAIN_WINDOW_S)
        self._drain_blocks = RateWindow(DRAIN_WINDOW_S)
        self.lifetimes = Lifetimes()
        """How long admitted requests live: when those in flight free their room, what a
        newcomer's predicted start depends on (lifetimes.py)."""
        self._good = RateWindow(DRAIN_WINDOW_S)
        self.finished_total = 0
        """Admitted requests ended so far (the autopilot judges a level over enough of them)."""
        self.served_total = 0
        """...of them completed with their first token within the TTFT SLO."""
        self.prefill = PrefillRate()
        """Prompt tokens prefilled per busy second (the prefill budget's and wait's rate)."""
        self.engine_ttft_s = 0.0
        """Recent engine-side TTFT (arrival at the engine to first byte), smoothed."""

    def finished(
        self, now: float, kv_blocks: int, life_s: float | None = None, expected_out: int = 0
    ) -> None:
        """An admitted request ended (whatever its outcome): its slot and blocks are free.
        `life_s`: seconds from admission to a completed end (None: not completed, so not a
        life to learn from); `expected_out`: the output tokens it was expected to make."""
        self._drain.add(now)
        self._drain_blocks.add(now, kv_blocks)
        self.finished_total += 1
        if life_s is not None:
            self.lifetimes.finished(now, life_s, expected_out)

    def served_within_slo(self, now: float) -> None:
        """A request completed whose first token came within the TTFT SLO."""
        self._good.add(now)
        self.served_total += 1

    def good_per_s(self, now: float) -> float:
        """Requests served within the TTFT SLO per second lately (the autopilot's objective)."""
        return self._good.rate(now) or 0.0

    def first_token(self, seconds: float, queue_s: float) -> None:
        """A first token `seconds` after arrival, `queue_s` of them queued in the gateway."""
        engine_s = max(0.0, seconds - queue_s)
        self.engine_ttft_s += ENGINE_TTFT_GAIN * (engine_s - self.engine_ttft_s)

    def drain_rate(self, now: float) -> float | None:
        """Requests finished per second lately (None before the first)."""
        return self._drain.rate(now)

    def queue_budget_s(self, slo_s: float) -> float:
        """Seconds a request may wait in the queue and still meet a TTFT of `slo_s`."""
        return max(0.0, slo_s - self.engine_ttft_s)

    def retry_after_s(self, now: float, backlog: int, queue_timeout_s: float) -> float:
        """Seconds until `backlog` requests have drained at the recent completion rate."""
        rate = self._drain.rate(now)
        if not rate:
            # Nothing has completed recently, so there is no rate to go by: a short guess keeps
            # well-behaved clients from sleeping a whole queue_timeout on an idle-then-busy gateway.
            return max(1.0, min(queue_timeout_s, UNKNOWN_DRAIN_RETRY_S))
        return max(1.0, min(backlog / rate, 3600.0))

    def prefill_wait_s(self, tokens_over: int) -> float | None:
        """Seconds until `tokens_over` more prompt tokens than the prefill budget has free are
        prefilled, at the measured prefill rate (0 when none are over; None: no rate yet)."""
        if tokens_over <= 0:
            return 0.0
        rate = self.prefill.rate()
        return tokens_over / rate if rate else None
