"""Token-length distributions rebuilt from vLLM's prompt and generation token histograms. Pure.

The 1-2-5 buckets are coarse, so the exact mean (sum/count) pins the distribution: shares kept,
uniform in each bucket, the range cut (or shaped) so the mean comes out exact; docs/whatif.md.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True)
class LengthDist:
    """A length distribution: bucket (lo, hi] shares and the in-bucket exponent; tokens >= 1."""

    bounds: tuple[tuple[int, int], ...]
    """(lo, hi] of each non-empty bucket, in tokens."""
    shares: tuple[float, ...]
    """Probability of each bucket; sums to 1."""
    exponent: float
    """In-bucket position is u ** exponent (1: uniform, > 1: towards the bucket's low end)."""
    mean: float
    """The observed mean (sum / count) the distribution was fitted to."""

    @classmethod
    def fixed(cls, tokens: int) -> LengthDist:
        """Every request the same length (tests; a workload with no histogram yet)."""
        return cls(((tokens - 1, tokens),), (1.0,), 1e-9, float(tokens))

    def mean_of(self, exponent: float) -> float:
        """The mean this distribution has with a given exponent (continuous, before rounding)."""
        frac = 1.0 / (exponent + 1.0)
        return sum(
            p * (lo + (hi - lo) * frac)
            for (lo, hi), p in zip(self.bounds, self.shares, strict=True)
        )

    def sampler(self, rng: random.Random, cap: int | None = None) -> LengthSampler:
        """A fast sampler over this distribution, drawing from `rng`; lengths clipped to `cap`."""
        return LengthSampler(self, rng, cap)


class LengthSampler:
    """Draws lengths from a `LengthDist` (a few hundred ns a draw)."""

    def __init__(self, dist: LengthDist, rng: random.Random, cap: int | None) -> None:
        self._cum = list(accumulate(dist.shares))
        self._cum[-1] = 1.0
        self._bounds = dist.bounds
        self._exp = dist.exponent
        self._rng = rng
        self._cap = cap

    def draw(self) -> int:
        r = self._rng.random
        lo, hi = self._bounds[bisect_left(self._cum, r())]
        n = math.ceil(lo + (hi - lo) * float(r() ** self._exp))
        n = max(lo + 1, min(n, hi))
        return n if self._cap is None else min(n, self._cap)


def from_histogram(
    buckets: tuple[tuple[float, float], ...], total: float, count: float
) -> LengthDist | None:
    """The distribution of cumulative (le, count) buckets with the exact mean total/count.

    None when the histogram holds no observation. A +Inf bucket is given the width of the one
    below it (vLLM's top finite bucket is max_model_len, so it is empty in practice).
    """
    if count <= 0:
        return None
    ordered = sorted(buckets)
    bounds: list[tuple[int, int]] = []
    shares: list[float] = []
    prev_le, prev_c = 0.0, 0.0
    for le, c in ordered:
        n = max(0.0, c - prev_c)
        hi = le if math.isfinite(le) else max(prev_le * 2.0, prev_le + 1.0)
        if n > 0:
            bounds.append((int(prev_le), max(int(prev_le) + 1, int(hi))))
            shares.append(n)
        prev_le, prev_c = hi, max(prev_c, c)
    total_n = sum(shares)
    if total_n <= 0:
        return None
    probs = tuple(s / total_n for s in shares)
    mean = total / count
    cut = _cut_range(tuple(bounds), probs, mean)
    if cut is not None:
        return LengthDist(cut, probs, 1.0, mean)
    dist = LengthDist(tuple(bounds), probs, 1.0, mean)
    return LengthDist(dist.bounds, probs, _fit_exponent(dist, mean), mean)


def _cut_range(
    bounds: tuple[tuple[int, int], ...], probs: tuple[float, ...], mean: float
) -> tuple[tuple[int, int], ...] | None:
    """The buckets with the top one's upper end (mean below the midpoints) or the bottom one's
    lower end (above) moved so the uniform-in-bucket mean is `mean`; None when one cut cannot
    reach it (the bucket would have to close)."""
    mids = [p * (lo + hi) / 2.0 for (lo, hi), p in zip(bounds, probs, strict=True)]
    full = sum(mids)
    if math.isclose(mean, full, rel_tol=1e-9):
        return bounds
    i = len(bounds) - 1 if mean < full else 0
    lo, hi = bounds[i]
    mid = (mean - (full - mids[i])) / probs[i]  # the midpoint the cut bucket needs
    new = (lo, round(2.0 * mid - lo)) if mean < full else (round(2.0 * mid - hi), hi)
    if not lo <= new[0] < new[1] <= hi:
        return None
    return (*bounds[:i], new, *bounds[i + 1 :])


def _fit_exponent(dist: LengthDist, mean: float) -> float:
    """The exponent whose mean is `mean`, by bisection on log(exponent); clamped to the range."""
    lo, hi = math.log(1e-3), math.log(1e3)
    if mean >= dist.mean_of(math.exp(lo)):
        return math.exp(lo)
    if mean <= dist.mean_of(math.exp(hi)):
        return math.exp(hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if dist.mean_of(math.exp(mid)) > mean:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))
