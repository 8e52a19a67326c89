"""Histogram quantiles as PromQL's histogram_quantile computes them, from cumulative
(upper bound, count) buckets: a window's bucket increments (`series.CounterWindow`), or two
scrapes' (`signals`). The one bucket quantile of llmtop. Pure.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate


def _running_max(counts: list[float]) -> list[float]:
    """The counts made monotonic, as max(running, c) from running = 0.0 makes them: bucket
    deltas of a window can dip across a reset. Counts that never fall (the usual case) are
    their own running max, except the leading ones at or below zero: the running 0.0."""
    if all(map(operator.le, counts, counts[1:])):
        zeros = bisect_right(counts, 0.0)
        return [0.0] * zeros + counts[zeros:] if zeros else counts
    running = accumulate(counts, max, initial=0.0)  # the same max(running, c) calls, in C
    next(running)  # the initial 0.0
    return list(running)


class Buckets:
    """Cumulative (upper bound, count) buckets sorted once: `derive` reads two or three
    quantiles of each histogram, and asks each time whether it lands in the first bucket."""

    __slots__ = ("_bounds", "_counts", "_peak", "_raw")

    def __init__(self, buckets: Sequence[tuple[float, float]]) -> None:
        ordered = sorted(buckets)
        self._bounds = [b for b, _ in ordered]
        self._raw = [c for _, c in ordered]
        self._counts: list[float] | None = None
        self._peak: float | None = None

    def quantile(self, q: float) -> float | None:
        """`histogram_quantile(q, buckets)`."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: Sequence[float], cap: float | None = None) -> list[float | None]:
        """`quantile` of each q, the histogram's checks made once; with a `cap`, a q that
        lands in the first bucket (where interpolation says nothing) reads the cap instead
        (derive: the window's mean, capped)."""
        raw, bounds = self._raw, self._bounds
        peak = None
        if cap is not None and raw:
            peak = self._peak
            if peak is None:
                peak = self._peak = max(raw)
            if not peak > 0:
                peak = None
        counts: list[float] = []
        total = 0.0
        if bounds and math.isinf(bounds[-1]):  # else no +Inf bucket: not a valid histogram
            counts = self._counts if self._counts is not None else _running_max(raw)
            self._counts = counts
            total = counts[-1]
        out: list[float | None] = []
        last = len(bounds) - 1
        for q in qs:
            if peak is not None and raw[0] >= q * peak:
                out.append(cap)
                continue
            if not counts or total <= 0 or math.isnan(q):
                out.append(None)
                continue
            if q < 0:
                out.append(-math.inf)
                continue
            if q > 1:
                out.append(math.inf)
                continue
            rank = q * total
            if rank == rank:  # the first count at the rank: counts never fall
                i = bisect_left(counts, rank)
            else:
                i = next(i for i, c in enumerate(counts) if c >= rank)
            if i == last:
                out.append(bounds[-2] if last >= 1 else None)
                continue
            upper = bounds[i]
            if i == 0:
                if upper <= 0:
                    out.append(upper)
                    continue
                lower, below = 0.0, 0.0
            else:
                lower, below = bounds[i - 1], counts[i - 1]
            in_bucket = counts[i] - below
            if in_bucket <= 0:
                out.append(upper)
                continue
            # Clamped: with subnormal counts the division can round past 1 and leave the bucket.
            fraction = min(1.0, max(0.0, (rank - below) / in_bucket))
            out.append(lower + (upper - lower) * fraction)
        return out


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (upper bound, count) buckets, like PromQL.

    Linear interpolation inside the bucket holding the rank; the lowest bucket interpolates
    from 0; a rank in the +Inf bucket returns the largest finite bound. None when empty.
    """
    return Buckets(buckets).quantile(q)
