"""Refusals checked against what happened: each arrival 429 for "cannot start within the TTFT
budget" keeps its predicted start, and the ledger watches for when the refused request would
really have started (everyone ahead gone, room in the budgets). Per minute: how many were refused,
and how many got their slot within budget after all. Pure and bounded: OPEN_MAX watched at once
(an older one closed unsettled), each for HORIZON_S at most, MINUTES minutes kept."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmtop.core.derive.percentiles import percentile_nearest_rank

OPEN_MAX = 512
"""Refusals watched at once; past it the oldest is closed with no slot seen."""
HORIZON_S = 60.0
"""A refusal whose slot has not come within this long is closed with no slot seen."""
MINUTES = 10
"""Minutes of accounting kept for /admin/stats."""


@dataclass
class Refusal:
    """One 429 at arrival: when, the predicted start and the budget it was past, and what
    would have let it start."""

    at: float
    predicted_s: float
    budget_s: float
    rank: int
    """Its priority's place (0 highest): waiters of this rank or higher go before it."""
    seq_mark: int
    """The queue's next seq when it was refused: waiters below it were ahead of it."""
    prompt_tokens: int
    kv_blocks: int
    slot_s: float | None = None
    """Seconds after the refusal its slot came (None: not yet, or not within HORIZON_S)."""


@dataclass
class Minute:
    """One minute's refusals, counted as they settle."""

    start: float
    refused: int = 0
    settled: int = 0
    in_time: int = 0
    """...of the settled, how many had their slot within their budget."""
    predicted: list[float] | None = None
    slots: list[float] | None = None


Blocked = Callable[[int, int], bool]
"""(rank, seq_mark) -> whether a waiter that was ahead of it still waits."""
Fits = Callable[[int, int], bool]
"""(prompt tokens, KV blocks) -> whether such a request would be admitted now."""


class RefusalLedger:
    """The open refusals and the minutes of their outcomes."""

    __slots__ = ("_minutes", "_open", "unsettled")

    def __init__(self) -> None:
        self._open: deque[Refusal] = deque()
        self._minutes: deque[Minute] = deque(maxlen=MINUTES)
        self.unsettled = 0
        """Refusals closed with no slot seen within HORIZON_S (or crowded out of OPEN_MAX)."""

    @property
    def watching(self) -> int:
        """Refusals still waiting for their slot."""
        return len(self._open)

    def _minute(self, at: float) -> Minute:
        start = at - at % 60.0
        minutes = self._minutes
        if not minutes or minutes[-1].start < start:
            minutes.append(Minute(start, predicted=[], slots=[]))
        for m in reversed(minutes):
            if m.start <= at:
                return m
        return minutes[0]

    def refused(self, refusal: Refusal) -> None:
        """A 429 at arrival for its predicted start."""
        minute = self._minute(refusal.at)
        minute.refused += 1
        if minute.predicted is not None:
            minute.predicted.append(refusal.predicted_s)
        if len(self._open) >= OPEN_MAX:
            self._close(self._open.popleft(), None)
        self._open.append(refusal)

    def _close(self, r: Refusal, slot_s: float | None) -> None:
        r.slot_s = slot_s
        minute = self._minute(r.at)
        if minute.start > r.at:  # older than the minutes kept
            return
        if slot_s is None:
            self.unsettled += 1
            return
        minute.settled += 1
        if minute.slots is not None:
            minute.slots.append(slot_s)
        if slot_s <= r.budget_s:
            minute.in_time += 1

    def settle(self, now: float, blocked: Blocked, fits: Fits) -> None:
        """Room may have freed: close each refusal whose slot is here now."""
        if not self._open:
            return
        still: deque[Refusal] = deque()
        for r in self._open:
            if now - r.at > HORIZON_S:
                self._close(r, None)
            elif not blocked(r.rank, r.seq_mark) and fits(r.prompt_tokens, r.kv_blocks):
                self._close(r, now - r.at)
            else:
                still.append(r)
        self._open = still

    def doc(self, now: float) -> dict[str, Any]:
        """/admin/stats' `refusals`: the last minute's counts, a line saying them, and each
        minute kept."""
        rows = [_row(m) for m in self._minutes]
        recent = [m for m in self._minutes if now - m.start < 120.0]
        refused = sum(m.refused for m in recent)
        in_time = sum(m.in_time for m in recent)
        settled = sum(m.settled for m in recent)
        slots = [s for m in recent for s in (m.slots or [])]
        predicted = [p for m in recent for p in (m.predicted or [])]
        return {
            "refused": refused,
            "settled": settled,
            "slot_within_budget": in_time,
            "watching": self.watching,
            "unsettled": self.unsettled,
            "predicted_p50_s": percentile_nearest_rank(sorted(predicted), 50),
            "slot_p50_s": percentile_nearest_rank(sorted(slots), 50),
            "text": _text(refused, in_time, predicted, slots),
            "minutes": rows,
        }


def _row(m: Minute) -> dict[str, Any]:
    return {
        "start": m.start,
        "refused": m.refused,
        "settled": m.settled,
        "slot_within_budget": m.in_time,
        "predicted_p50_s": percentile_nearest_rank(sorted(m.predicted or []), 50),
        "slot_p50_s": percentile_nearest_rank(sorted(m.slots or []), 50),
    }


def _text(refused: int, in_time: int, predicted: list[float], slots: list[float]) -> str:
    """The refusals of the last two minutes in words, with the figures people check."""
    if not refused:
        return "refusals: 0"
    low = min(predicted) if predicted else 0.0
    if not slots:
        return f"refusals: {refused}, predicted wait > {low:.1f} s; no slot seen yet"
    top = max(slots)
    return (
        f"refusals: {refused}, of which predicted wait > {low:.1f} s and the next slot came"
        f" within {top:.1f} s: {len(slots)}; within their budget: {in_time}"
    )
