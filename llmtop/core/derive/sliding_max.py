"""The most of a figure over the last seconds, per engine URL, as polls come in. Pure. A monotonic
deque: a value older and no higher than a newer one is dropped (O(1) amortised a poll); ties go
to the newest, a NaN is no maximum, time stepping back starts over (as `series.CounterWindow`).
Buys 0.6-0.8 % of a core at 100 replicas (the KV look-backs), BENCHMARKS §15.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class SlidingMax(Generic[T]):
    """Per URL, the highest value added over the last `keep_s` seconds, with what came with it."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._rows: dict[str, deque[tuple[float, float, T]]] = {}
        self._latest = -math.inf

    def add(self, url: str, t: float, value: float, extra: T) -> None:
        """A value at time `t` (seconds; times of one URL in order, or the window starts over)."""
        if t < self._latest:
            self._rows.clear()  # time stepped back: start over rather than mix two clocks
        self._latest = t
        if math.isnan(value):
            return
        rows = self._rows.get(url)
        if rows is None:
            rows = self._rows[url] = deque()
        while rows and rows[-1][1] <= value:
            rows.pop()  # older and no higher: never the answer while this one is kept
        rows.append((t, value, extra))
        cut = t - self.keep_s
        while rows[0][0] < cut:
            rows.popleft()

    def most(self, url: str, since: float) -> tuple[float, float, T] | None:
        """(time, value, extra) of the highest value added at `since` or later, the newest of
        equals; None when there is none. Asked with a `since` that never goes back (the
        window's start as time goes on): what is older is let go for good."""
        rows = self._rows.get(url)
        if not rows:
            return None
        while rows and rows[0][0] < since:
            rows.popleft()
        return rows[0] if rows else None
