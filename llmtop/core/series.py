"""Time series arithmetic: reset-aware counter increments over a sliding window, and
histogram quantiles as PromQL's histogram_quantile computes them.

A counter that goes down was reset (the engine restarted): its increment for that poll is its
new value, as Prometheus's rate() assumes. Counters are grouped (one histogram's buckets, sum
and count form one group) so a reset seen on any member resets the whole group. The window
holds per-poll increments, so rates over it survive resets and gaps. Pure: time comes in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence

Key = tuple[str, Hashable]
"""(group, member): e.g. ("prompt_tokens", None) or ("ttft", 0.25) for one bucket."""
Step = tuple[float, float, dict[str, dict[Hashable, float]]]
"""(start time, end time, group -> member -> increment) of one poll."""


class CounterWindow:
    """Reset-aware increments of named counters, kept for `keep_s` seconds."""

    def __init__(self, keep_s: float = 600.0) -> None:
        self.keep_s = keep_s
        self._prev: dict[Key, float] | None = None
        self._prev_time: float | None = None
        self._steps: deque[Step] = deque()
        self._last_window: tuple[float, Step, list[Step]] | None = None
        """(window_s, latest step, its window): one derive asks for the same window ~25 times."""

    def add(self, t: float, values: Mapping[Key, float]) -> None:
        """Record one scrape's cumulative values at time `t` (seconds)."""
        if self._prev is not None and self._prev_time is not None and t > self._prev_time:
            prev = self._prev
            reset_groups = {k[0] for k, v in values.items() if k in prev and v < prev[k]}
            inc: dict[str, dict[Hashable, float]] = {}
            for k, v in values.items():
                group, member = k
                fresh = group in reset_groups or k not in prev
                inc.setdefault(group, {})[member] = v if fresh else v - prev[k]
            self._steps.append((self._prev_time, t, inc))
            while self._steps and self._steps[0][1] < t - self.keep_s:
                self._steps.popleft()
        elif self._prev_time is not None and t <= self._prev_time:
            self._steps.clear()  # time went backwards: start over rather than divide by <= 0
        self._prev = dict(values)
        self._prev_time = t

    def _window(
        self, window_s: float
    ) -> list[tuple[float, float, dict[str, dict[Hashable, float]]]]:
        """The steps that start inside the window (at least the latest one), oldest first."""
        if not self._steps:
            return []
        latest = self._steps[-1]
        memo = self._last_window
        if memo is not None and memo[0] == window_s and memo[1] is latest:
            return memo[2]
        cutoff = latest[1] - window_s - 1e-9
        out: list[Step] = []
        for step in reversed(self._steps):
            if step[0] < cutoff and out:
                break
            out.append(step)
        out.reverse()
        self._last_window = (window_s, latest, out)
        return out

    def span_s(self, window_s: float) -> float | None:
        """Seconds the window's increments cover (None before two scrapes)."""
        steps = self._window(window_s)
        return None if not steps else steps[-1][1] - steps[0][0]

    def delta(self, key: Key, window_s: float) -> float | None:
        """Increase of `key` over the window; None when it was not in two scrapes."""
        group, member = key
        found = [
            s[2][group][member] for s in self._window(window_s) if member in s[2].get(group, {})
        ]
        return sum(found) if found else None

    def rate(self, key: Key, window_s: float) -> float | None:
        """Per-second increase over the window; None when unknown."""
        d = self.delta(key, window_s)
        span = self.span_s(window_s)
        return None if d is None or not span else d / span

    def group(self, group: str, window_s: float) -> dict[Hashable, float]:
        """Summed increments of every member of `group` over the window."""
        found = [g for _, _, inc in self._window(window_s) if (g := inc.get(group))]
        if found and all(g.keys() == found[0].keys() for g in found):
            # the usual case, the same members every poll: sum column by column, in C
            sums = map(sum, zip(*(g.values() for g in found), strict=True))
            return dict(zip(found[0], sums, strict=True))
        out: dict[Hashable, float] = {}
        for g in found:
            for member, v in g.items():
                out[member] = out.get(member, 0.0) + v
        return out


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (upper bound, count) buckets, like PromQL.

    Linear interpolation inside the bucket holding the rank; the lowest bucket interpolates
    from 0; a rank in the +Inf bucket returns the largest finite bound. None when empty.
    """
    if not buckets or math.isnan(q):
        return None
    ordered = sorted(buckets)
    if not math.isinf(ordered[-1][0]):
        return None  # no +Inf bucket: not a valid histogram
    # Bucket deltas of a window can be slightly non-monotonic across a reset; force monotonic.
    counts: list[float] = []
    running = 0.0
    for _, c in ordered:
        running = max(running, c)
        counts.append(running)
    total = counts[-1]
    if total <= 0:
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    rank = q * total
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if i == len(ordered) - 1:
        return ordered[-2][0] if len(ordered) >= 2 else None
    upper = ordered[i][0]
    if i == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = ordered[i - 1][0], counts[i - 1]
    in_bucket = counts[i] - below
    if in_bucket <= 0:
        return upper
    # Clamped: with subnormal counts the division can round past 1 and leave the bucket.
    fraction = min(1.0, max(0.0, (rank - below) / in_bucket))
    return lower + (upper - lower) * fraction


def quantile_lands_in_first_bucket(q: float, buckets: Sequence[tuple[float, float]]) -> bool:
    """Whether the q-quantile falls in the lowest bucket, where interpolation says nothing."""
    if not buckets:
        return False
    ordered = sorted(buckets)
    total = max(c for _, c in ordered)
    return total > 0 and ordered[0][1] >= q * total
