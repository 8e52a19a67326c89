"""Bounded, pure time windows for the gateway's live figures: recent quantiles, recent rates and
cumulative histograms for /metrics. Every method takes `now` from the caller's clock, so the
admission controller's fake-clock tests drive them too.
"""

from __future__ import annotations

import bisect
from collections import deque

from llmtop.core.derive.percentiles import percentile_nearest_rank

DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # bounds as a row, as a histogram's are read  # fmt: skip


class SampleWindow:
    """The samples of the last `window_s` seconds, capped at `max_samples` (newest kept).

    The cap bounds memory at high request rates; past it the window is effectively shorter.
    """

    def __init__(self, window_s: float = 60.0, max_samples: int = 20_000) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)

    def add(self, now: float, value: float) -> None:
        self._samples.append((now, value))

    def _prune(self, now: float) -> None:
        cutoff = now - self.window_s
        samples = self._samples
        while samples and samples[0][0] < cutoff:
            samples.popleft()

    def quantiles(self, now: float, qs: tuple[float, ...]) -> list[float | None]:
        """Nearest-rank quantiles (`qs` as fractions, 0.95 for p95) of the window: each a
        value seen; None for each when it holds no sample."""
        self._prune(now)
        values = sorted(v for _, v in self._samples)
        return [percentile_nearest_rank(values, q * 100) for q in qs]


class RateWindow:
    """Events per second over the last `window_s` seconds, kept as one counter per second."""

    def __init__(self, window_s: int = 10) -> None:
        self.window_s = window_s
        self._buckets: deque[list[int]] = deque()  # [second, count]
        self._first: float | None = None

    def add(self, now: float, n: int = 1) -> None:
        sec = int(now)
        if self._first is None:
            self._first = now
        if self._buckets and self._buckets[-1][0] == sec:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([sec, n])
            while self._buckets and self._buckets[0][0] <= sec - self.window_s:
                self._buckets.popleft()

    def rate(self, now: float) -> float | None:
        """Events per second; None before the first event, 0.0 when the window went quiet."""
        if self._first is None:
            return None
        sec = int(now)
        count = sum(c for s, c in self._buckets if s > sec - self.window_s)
        span = min(float(self.window_s), max(1.0, now - self._first))
        return count / span


class CumulativeHistogram:
    """A Prometheus-style histogram: cumulative bucket counts, sum and count, O(log b) a sample."""

    def __init__(self, buckets: tuple[float, ...] = DEFAULT_BUCKETS_S) -> None:
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs ending with +Inf, as exposition text wants them."""
        out: list[tuple[str, int]] = []
        total = 0
        for le, c in zip(self.buckets, self._counts, strict=False):
            total += c
            out.append((repr(float(le)), total))
        out.append(("+Inf", total + self._counts[-1]))
        return out
