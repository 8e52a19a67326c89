"""Percentiles of samples, the one home of both methods llmtop uses. Pure. `percentile_linear`
(numpy's default, Hyndman-Fan type 7): a smooth figure for a run's summary (`llmtop load`, the
what-if); `percentile_nearest_rank`: always a seen sample, optionally weighted (the gateway's
live windows, the what-if's token-weighted ITL). Of buckets: `histogram.histogram_quantile`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile_linear(values: Sequence[float], pct: float) -> float | None:
    """The `pct`-th percentile (0..100), interpolated between ranks; None when empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * min(max(pct, 0.0), 100.0) / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def percentile_nearest_rank(
    values: Sequence[float], pct: float, weights: Sequence[float] | None = None
) -> float | None:
    """The smallest value with at least `pct` % (0..100) of the samples, or of their
    `weights`, at or below it; None when empty (or weighing nothing)."""
    if weights is None:
        if not values:
            return None
        xs = sorted(values)
        n = len(xs)
        return xs[min(n - 1, max(0, math.ceil(pct / 100 * n) - 1))]
    total = sum(weights)
    if total <= 0:
        return None
    rank = pct / 100 * total
    acc = 0.0
    for value, w in sorted(zip(values, weights, strict=True)):
        acc += w
        if acc >= rank:
            return value
    return max(values)
