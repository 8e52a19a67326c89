"""When the admitted requests will free their room: each one's predicted end, from its age and how
long completed requests lived per token of their expected output. A deadline 429 rests on this, so
it reads the ends of the requests in flight, which do not depend on whether anyone waited, not a
rate of room freed "while a queue waited", which sees only the releases inside short waits
(docs/autopilot.md, "The KV budget"). Pure: `now` comes from the controller's clock."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Protocol

LIFE_WINDOW_S = 30.0
"""Time constant of the seconds-per-token estimate: older lives weigh e^-1 after this long."""
MIN_LIVES = 1.0
"""Decayed weight of completed lives below which no prediction is claimed (None: unknown)."""


class Living(Protocol):
    """What the prediction reads of an admitted request (admission's Ticket)."""

    admitted_at: float | None
    expected_out: int
    kv_blocks: int
    prompt_tokens: int


class Lifetimes:
    """Seconds an admitted request lives (admission to release) per (expected output token +
    1), decayed over LIFE_WINDOW_S; and, from it, when the requests in flight end."""

    __slots__ = (
        "_ends",
        "_lives",
        "_mean_units",
        "_n",
        "_prefix",
        "_seconds",
        "_t",
        "_units",
        "version",
    )

    def __init__(self) -> None:
        self._t: float | None = None
        self._seconds = 0.0
        self._units = 0.0
        self._lives = 0.0
        self.version = 0
        """Bumped with every life learnt: the cached ends are stale then."""
        self._n: tuple[int, int] = (-1, -1)
        self._ends: list[float] = []
        self._prefix: list[int] = []
        self._mean_units = 1.0

    def finished(self, now: float, life_s: float, expected_out: int) -> None:
        """A request completed `life_s` after its admission; it expected `expected_out`
        output tokens (0: unknown, so every request weighs the same)."""
        if self._t is not None and now > self._t:
            keep = math.exp(-(now - self._t) / LIFE_WINDOW_S)
            self._seconds *= keep
            self._units *= keep
            self._lives *= keep
        self._t = now
        self._seconds += max(0.0, life_s)
        self._units += max(0, expected_out) + 1
        self._lives += 1.0
        self.version += 1

    def per_token_s(self) -> float | None:
        """Seconds of life per expected output token (+1); None before enough lives."""
        if self._lives < MIN_LIVES or self._units <= 0:
            return None
        return self._seconds / self._units

    def _cache(self, held: Iterable[Living], version: int) -> bool:
        """The ends (absolute, sorted) and the blocks freed by each, cumulated; False when
        no estimate yet."""
        per = self.per_token_s()
        if per is None:
            return False
        if self._n == (version, self.version):
            return True
        units = [(t.admitted_at or 0.0, t.expected_out + 1, t.kv_blocks) for t in held]
        pairs = sorted((at + per * u, blocks) for at, u, blocks in units)
        self._mean_units = sum(u for _, u, _ in units) / len(units) if units else 1.0
        self._ends = [e for e, _ in pairs]
        self._prefix = []
        total = 0
        for _, blocks in pairs:
            total += blocks
            self._prefix.append(total)
        self._n = (version, self.version)
        return True

    def wait_s(
        self, now: float, held: Iterable[Living], version: int, requests: int, blocks: int
    ) -> float | None:
        """Seconds until `requests` of the requests in flight (`held`, whose set is at
        `version`) have ended and `blocks` KV blocks are free: the earliest predicted ends
        (a request past its predicted end is taken to end now). Past what is in flight, the
        rest drains at what is in flight over its mean life (Little's law). None before any
        life was measured, or with nothing in flight to end."""
        if requests <= 0 and blocks <= 0:
            return 0.0
        if not self._cache(held, version) or not self._ends:
            return None
        ends, prefix = self._ends, self._prefix
        n = len(ends)
        per = self.per_token_s()
        assert per is not None
        mean_life = max(1e-3, per * self._mean_units)
        waits = [0.0]
        if requests > 0:
            if requests <= n:
                waits.append(max(0.0, ends[requests - 1] - now))
            else:
                waits.append(max(0.0, ends[-1] - now) + (requests - n) * mean_life / n)
        if blocks > 0:
            i = bisect.bisect_left(prefix, blocks)
            if i < n:
                waits.append(max(0.0, ends[i] - now))
            elif prefix[-1] > 0:
                rest = blocks - prefix[-1]
                waits.append(max(0.0, ends[-1] - now) + rest * mean_life / prefix[-1])
            else:
                return None
        return max(waits)

    def peak_share(
        self,
        now: float,
        held: Iterable[Living],
        block_size: int,
        per_token_s: float | None = None,
    ) -> float | None:
        """The most KV the requests in flight will hold together from now on, as a share of their
        summed footprint: each holds its prompt's blocks at once, grows linearly to its footprint
        over its predicted life, then frees it all (so a burst's newcomers peak well under their
        footprint). `per_token_s`: seconds of life per output token before any life was measured
        (the engine's inter-token latency); None with neither, or with nothing in flight."""
        per = self.per_token_s() or per_token_s
        if per is None:
            return None
        rows = _rows(now, held, block_size, per)
        footprint = sum(r[3] for r in rows)
        if footprint <= 0:
            return None
        rows.sort(reverse=True)  # latest end first: at each end, those ending later still hold
        return min(1.0, _peak(rows) / footprint)


Row = tuple[float, float, float, float]
"""A request's KV over time: (its end, intercept, slope, footprint): it holds intercept +
slope x t blocks at time t until its end."""


def _rows(now: float, held: Iterable[Living], block_size: int, per: float) -> list[Row]:
    rows: list[Row] = []
    for t in held:
        life = per * (t.expected_out + 1)
        start = t.admitted_at if t.admitted_at is not None else now
        if start + life <= now or life <= 0:  # due to end: all of its footprint, now
            rows.append((now, float(t.kv_blocks), 0.0, float(t.kv_blocks)))
            continue
        prompt = min(t.kv_blocks, -(-t.prompt_tokens // max(1, block_size)))
        grow = (t.kv_blocks - prompt) / life
        rows.append((start + life, prompt - grow * start, grow, float(t.kv_blocks)))
    return rows


def _peak(rows: list[Row], extra: Row | None = None, k: int = 0) -> float:
    """The most the rows (and `k` copies of `extra`) hold together from now on: the sum
    peaks just before one of them ends. `rows` sorted latest end first."""
    base = slope = peak = 0.0
    pending = extra if extra is not None and k > 0 else None
    for end, b, g, _ in rows:
        if pending is not None and pending[0] >= end:
            base, slope = base + k * pending[1], slope + k * pending[2]
            peak = max(peak, base + slope * pending[0])
            pending = None
        base, slope = base + b, slope + g
        peak = max(peak, base + slope * end)
    if pending is not None:
        base, slope = base + k * pending[1], slope + k * pending[2]
        peak = max(peak, base + slope * pending[0])
    return peak


def newcomers_fit(
    now: float,
    held: Iterable[Living],
    block_size: int,
    per_token_s: float,
    limit_blocks: float,
    held_blocks: float,
    most: int,
    free_blocks: float | None = None,
) -> int:
    """How many more requests like the largest in flight (a bimodal mix is judged by its heavy
    side), admitted now, keep the predicted peak of all within `limit_blocks`; at most `most`, 0
    with nothing in flight. The peak is moved to the engine's measure (`held_blocks`, what it holds
    now, less what the trajectories say), and each newcomer's prompt must fit `free_blocks` (the
    engine's free cache: a prompt that does not fit waits inside it)."""
    tickets = list(held)
    if not tickets or per_token_s <= 0:
        return 0
    rows = _rows(now, tickets, block_size, per_token_s)
    rows.sort(reverse=True)
    like = max(tickets, key=lambda t: (t.kv_blocks, t.prompt_tokens))
    blocks = float(like.kv_blocks)
    prompt = min(blocks, float(-(-like.prompt_tokens // max(1, block_size))))
    life = per_token_s * (like.expected_out + 1)
    grow = (blocks - prompt) / life
    if free_blocks is not None:
        most = min(most, math.floor(max(0.0, free_blocks) / max(prompt, 1.0)))
    extra: Row = (now + life, prompt - grow * now, grow, blocks)
    modelled_now = sum(min(f, b + g * now) for _, b, g, f in rows)
    limit = limit_blocks - (held_blocks - modelled_now)
    if most <= 0 or _peak(rows) > limit:
        return 0
    lo, hi = 0, most  # the largest k whose peak fits: the peak grows with k
    while lo < hi:
        k = (lo + hi + 1) // 2
        if _peak(rows, extra, k) <= limit:
            lo = k
        else:
            hi = k - 1
    return lo
