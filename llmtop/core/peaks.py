"""decode-bound's look-back, kept as the history grows instead of rescanned every poll. Pure.

decode-bound compares an engine's per-sequence decode rate with the best one seen in the
pipeline's history (ten minutes) at half the running sequences or fewer: the first snapshot,
oldest first, whose rate is the highest among those where the engine ran at most half as many.
Rescanning 600 snapshots every poll was a third of a poll's derive. `DecodePeaks` keeps, per
engine URL and per running count, the sliding-window maximum of the rate (a monotonic deque:
the best stays at the front; equal rates keep the older first), so the answer is the best of
the fronts at the running counts that qualify. It holds exactly the snapshots the pipeline's
history holds (`add` as one is kept, `drop_oldest` as the oldest goes), and gives up (`exact`
is False) for an engine whose history holds a NaN rate, where "highest" depends on the order
of the scan: the rule then scans as before. `best_at_half` equals the scan (hypothesis:
tests/unit/test_peaks.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from llmtop.core.snapshot import EngineStats, Snapshot


class _Entry:
    """One engine row of one kept snapshot: where it stands in the scan's order."""

    __slots__ = ("order", "rate", "running", "stats")

    def __init__(self, order: tuple[int, int], stats: EngineStats, rate: float) -> None:
        self.order = order
        self.stats = stats
        self.rate = rate
        self.running = stats.running


def scan_best_at_half(history: Sequence[Snapshot], e: EngineStats) -> EngineStats | None:
    """The engine's snapshot with the best per-sequence decode rate at half its running now or
    fewer, oldest first among equals: the scan `DecodePeaks` stands in for."""
    best: EngineStats | None = None
    running = e.running
    if running is None:
        return None
    for snap in history:
        for p in snap.engines:
            if (
                p.url == e.url
                and p.running
                and p.decode_tok_per_s_per_seq is not None
                and p.running * 2 <= running
                and (
                    best is None
                    or p.decode_tok_per_s_per_seq > (best.decode_tok_per_s_per_seq or 0)
                )
            ):
                best = p
    return best


class DecodePeaks:
    """Per URL and running count, the kept snapshots' best per-sequence decode rates."""

    def __init__(self) -> None:
        self._fronts: dict[str, dict[float, deque[_Entry]]] = {}
        self._nan: dict[str, int] = {}
        """URL -> kept rows whose rate is NaN (the index is not exact for it meanwhile)."""
        self._kept: deque[list[tuple[str, _Entry | None]]] = deque()
        """Per kept snapshot, oldest first: its indexed rows (None: a NaN rate)."""
        self._added = 0

    def add(self, snap: Snapshot) -> None:
        """Index the snapshot the history has just kept (its newest)."""
        rows: list[tuple[str, _Entry | None]] = []
        seq = self._added
        self._added += 1
        for pos, p in enumerate(snap.engines):
            rate, running = p.decode_tok_per_s_per_seq, p.running
            if not running or rate is None or math.isnan(running):
                continue  # never a candidate: the scan skips it whatever runs now
            if math.isnan(rate):
                self._nan[p.url] = self._nan.get(p.url, 0) + 1
                rows.append((p.url, None))
                continue
            entry = _Entry((seq, pos), p, rate)
            front = self._fronts.setdefault(p.url, {}).setdefault(running, deque())
            while front and front[-1].rate < rate:
                front.pop()  # never the best again: this one is higher and stays longer
            front.append(entry)
            rows.append((p.url, entry))
        self._kept.append(rows)

    def drop_oldest(self) -> None:
        """Forget the oldest indexed snapshot (the history has let it go)."""
        for url, entry in self._kept.popleft():
            if entry is None:
                self._nan[url] -= 1
                if not self._nan[url]:
                    del self._nan[url]
                continue
            by_running = self._fronts[url]
            front = by_running.get(entry.running)  # type: ignore[arg-type]
            if front and front[0] is entry:
                front.popleft()
                if not front:
                    del by_running[entry.running]  # type: ignore[arg-type]
                    if not by_running:
                        del self._fronts[url]

    def exact(self, url: str) -> bool:
        """Whether `best_at_half` answers for this URL (no NaN rate among its kept rows)."""
        return url not in self._nan

    def best_at_half(self, url: str, running: float) -> EngineStats | None:
        """`scan_best_at_half` over the indexed history, for an engine running `running`."""
        best: _Entry | None = None
        for r, front in self._fronts.get(url, {}).items():
            if not r * 2 <= running:
                continue
            top = front[0]
            if (
                best is None
                or top.rate > best.rate
                or (top.rate == best.rate and top.order < best.order)
            ):
                best = top
        return None if best is None else best.stats
