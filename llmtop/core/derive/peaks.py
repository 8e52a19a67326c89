"""The rules' look-backs, kept as the history grows instead of rescanned every poll. Pure.

Two rules look back over many snapshots at every poll. decode-bound compares an engine's
per-sequence decode rate with the best one in the history (ten minutes) at half the running
sequences or fewer: the first snapshot, oldest first, whose rate is the highest among those
where it ran at most half as many. `kv_size` sizes a slot by the most KV a running sequence
held over the last minute: this poll first, then the newest snapshot back, the first of equals
winning. Rescanning 600 snapshots (or 60 for each of a hundred replicas, scattered in memory)
every poll was a third of a poll's derive. `HistoryIndex` keeps both as sliding-window maxima
(monotonic deques: the best stays at the front, a value that can never win again is dropped
as it is outdone), fed as the pipeline keeps a snapshot (`add`) and lets the oldest go
(`drop_oldest`), so it holds exactly the history's snapshots. Where the order of the scan
would decide between values that do not compare (a NaN), or the history's times are not in
order (a clock stepped back), it says it is not exact and the rule scans as before. Each
answer equals the scan's (hypothesis: tests/unit/test_peaks.py).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from llmtop.core.base.snapshot import EngineStats, Snapshot

_E = TypeVar("_E", bound=tuple[Any, ...])
_Entry = tuple[float, tuple[int, int], float | None, EngineStats]
"""One engine row of one kept snapshot: (rate, where it stands in the scan's order, running,
the row). Tuples, not a class: the indexes build one per replica and poll, and a class's
`__init__` costs a Python call each."""


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
            entry = (rate, (seq, pos), running, p)
            front = self._fronts.setdefault(p.url, {}).setdefault(running, deque())
            while front and front[-1][0] < rate:
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
            front = by_running.get(entry[2])  # type: ignore[arg-type]
            if front and front[0] is entry:
                front.popleft()
                if not front:
                    del by_running[entry[2]]  # type: ignore[arg-type]
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
            if best is None or top[0] > best[0] or (top[0] == best[0] and top[1] < best[1]):
                best = top
        return None if best is None else best[3]


_Held = tuple[float, float, float, float]
"""One engine row of one kept snapshot: (KV tokens per running sequence, time, usage,
running), a tuple as `_Entry`."""


def held_tokens(p: EngineStats) -> tuple[float, float, float] | None:
    """(KV usage, running, KV tokens per running sequence) of a row; None when unknown (a NaN
    or infinite figure too: it sizes nothing, and would stick as the look-back's most)."""
    cap, usage, running = p.kv_capacity_tokens, p.kv_cache_usage_frac, p.running
    if cap is None or usage is None or not running or running <= 0:
        return None
    tokens = usage * cap / running
    return (usage, running, tokens) if math.isfinite(tokens) else None


class _Fronts(Generic[_E]):
    """Per URL, sliding maxima over the kept snapshots' rows: a monotonic deque of entries
    (tuples whose `_VALUE`th item is compared), newest first among equals; the rows of each
    kept snapshot remembered so that `drop_oldest` lets the same entries go."""

    _VALUE: int

    def __init__(self) -> None:
        self._fronts: dict[str, deque[_E]] = {}
        self._nan: dict[str, int] = {}
        self._kept: deque[list[tuple[str, _E | None]]] = deque()
        self._added = 0
        self._dropped = 0
        self._newest: float | None = None
        self._out_of_order = 0
        """The newest snapshot kept at a time before its predecessor's (0: none): the index
        is exact again once that predecessor has gone."""

    def _rows(self, snap: Snapshot) -> list[tuple[str, _E | None]]:
        """A new kept snapshot's list of rows, its time noted."""
        if self._newest is not None and not snap.time >= self._newest:
            self._out_of_order = self._added
        self._newest = snap.time
        self._added += 1
        rows: list[tuple[str, _E | None]] = []
        self._kept.append(rows)
        return rows

    def _nan_row(self, rows: list[tuple[str, _E | None]], url: str) -> None:
        self._nan[url] = self._nan.get(url, 0) + 1
        rows.append((url, None))

    def _push(self, rows: list[tuple[str, _E | None]], url: str, entry: _E) -> None:
        value = entry[self._VALUE]
        front = self._fronts.setdefault(url, deque())
        while front and front[-1][self._VALUE] <= value:
            front.pop()  # older and no higher: never the answer while this one is kept
        front.append(entry)
        rows.append((url, entry))

    def drop_oldest(self) -> None:
        """Forget the oldest indexed snapshot (the history has let it go)."""
        self._dropped += 1
        for url, entry in self._kept.popleft():
            if entry is None:
                self._nan[url] -= 1
                if not self._nan[url]:
                    del self._nan[url]
                continue
            front = self._fronts.get(url)
            if front and front[0] is entry:
                front.popleft()
                if not front:
                    del self._fronts[url]
        if not self._kept:
            self._newest = None


class HeldPeaks(_Fronts[_Held]):
    """Per URL, the most KV a running sequence held in the kept snapshots, newest first."""

    _VALUE = 0  # (tokens, time, usage, running)

    def add(self, snap: Snapshot) -> None:
        """Index the snapshot the history has just kept (its newest)."""
        rows = self._rows(snap)
        # The scan reads a snapshot's rows first to last, newest snapshot first; pushed last
        # row first, a row outdoes the ones before it on equal terms.
        for p in reversed(snap.engines):
            held = held_tokens(p) if p.up else None
            if held is None:
                continue
            usage, running, tokens = held
            if math.isnan(tokens):
                self._nan_row(rows, p.url)
                continue
            self._push(rows, p.url, (tokens, snap.time, usage, running))

    def exact(self, url: str, now: float) -> bool:
        """Whether `most` answers for this URL at `now`: the kept times in order, none after
        `now`, no NaN among the URL's rows."""
        newest = self._newest
        return (
            self._dropped >= self._out_of_order
            and (newest is None or now >= newest)
            and url not in self._nan
        )

    def most(
        self, url: str, now: float, lookback_s: float
    ) -> tuple[float, float, float, float] | None:
        """(usage, running, tokens, time) of the kept row that held the most KV per running
        sequence since `now - lookback_s`, the newest of equals; None when none did.
        Only where `exact` says so: rows older than the look-back are let go for good."""
        front = self._fronts.get(url)
        if not front:
            return None
        oldest = now - lookback_s
        while front and front[0][1] < oldest:
            front.popleft()
        if not front:
            del self._fronts[url]
            return None
        tokens, time, usage, running = front[0]
        return usage, running, tokens, time


_Usage = tuple[float, float]
"""One engine row of one kept snapshot: (time, KV usage) (a tuple: built for every replica at
every poll, where a class's `__init__` costs a Python call)."""


class KvPeaks(_Fronts[_Usage]):
    """Per URL, the highest KV usage of the kept snapshots since a time, newest first among
    equals: `rulebase.kv_peak`'s look-back over the rules' window (kv-exhausted reads it for
    every replica at every poll while its cache is full)."""

    _VALUE = 1  # (time, usage)

    def __init__(self) -> None:
        super().__init__()
        self._cut = -math.inf
        """The latest `since` rows were let go for (an earlier one asks for them: not exact)."""

    def add(self, snap: Snapshot) -> None:
        """Index the snapshot the history has just kept (its newest)."""
        rows = self._rows(snap)
        # The scan reads a snapshot's rows first to last, newest snapshot first, and `max`
        # keeps the first of equals: pushed last row first, a row outdoes the ones before it
        # on equal terms.
        for p in reversed(snap.engines):
            usage = p.kv_cache_usage_frac
            if usage is None or not p.up:
                continue
            if math.isnan(usage):
                self._nan_row(rows, p.url)
                continue
            self._push(rows, p.url, (snap.time, usage))

    def peak(self, url: str, since: float) -> tuple[bool, float | None]:
        """(exact, the highest KV usage of the URL's up rows in the newest kept snapshot and
        every one at `since` or later, the newest of equals; None: no row knows it). Not exact
        where the scan must answer: kept times out of order, a NaN among the URL's rows, the
        newest snapshot before `since`, or `since` earlier than one asked before."""
        newest = self._newest
        if newest is None:
            return True, None
        if (
            self._dropped < self._out_of_order
            or url in self._nan
            or not newest >= since  # the scan still reads the newest: rare, and cheap there
            or since < self._cut
        ):
            return False, None
        front = self._fronts.get(url)
        if not front:
            return True, None
        if front[0][0] < since:
            self._cut = since  # rows before it are let go for good: later asks start later
            while front and front[0][0] < since:
                front.popleft()
            if not front:
                del self._fronts[url]
                return True, None
        return True, front[0][1]


def cliff_inputs(e: EngineStats) -> bool:
    """Whether a row knows what batching-cliff compares (waiting, decode rate)."""
    return e.waiting is not None and e.decode_tok_per_s is not None


_Row = tuple[int, float, EngineStats]
"""One engine row of one kept snapshot where `cliff_inputs` holds: (its snapshot's number,
time, the row), a tuple as `_Usage`."""


class PastRows:
    """Per URL, the kept up rows that know the batching-cliff inputs, oldest first: the row
    closest to a time ago found by bisection (`rules_engine._past`) instead of walking back
    through the snapshots, each one a cache miss when a hundred replicas are judged in turn."""

    known = staticmethod(cliff_inputs)
    """The rows kept: `_past` asks with this test or scans."""

    def __init__(self) -> None:
        self._rows: dict[str, deque[_Row]] = {}
        self._kept: deque[list[str]] = deque()
        """Per kept snapshot, oldest first: the URL of each of its indexed rows."""
        self._added = 0
        self._dropped = 0
        self._newest: float | None = None
        self._out_of_order = 0
        """As `HeldPeaks._out_of_order`."""
        self._not_finite = 0
        """Kept snapshots at a NaN or infinite time (not exact while any is kept)."""
        self._finite: deque[bool] = deque()
        """Per kept snapshot, oldest first: whether its time is finite."""

    def add(self, snap: Snapshot) -> None:
        """Index the snapshot the history has just kept (its newest)."""
        t = snap.time
        if self._newest is not None and not t >= self._newest:
            self._out_of_order = self._added
        finite = math.isfinite(t)
        if not finite:
            self._not_finite += 1
        self._finite.append(finite)
        self._newest = t
        seq = self._added
        self._added += 1
        urls: list[str] = []
        for p in snap.engines:
            if p.up and cliff_inputs(p):
                self._rows.setdefault(p.url, deque()).append((seq, t, p))
                urls.append(p.url)
        self._kept.append(urls)

    def drop_oldest(self) -> None:
        """Forget the oldest indexed snapshot (the history has let it go)."""
        self._dropped += 1
        for url in self._kept.popleft():
            rows = self._rows[url]
            rows.popleft()  # a URL's rows are in the order kept: the oldest snapshot's first
            if not rows:
                del self._rows[url]
        if not self._finite.popleft():
            self._not_finite -= 1
        if not self._kept:
            self._newest = None

    def closest(
        self, url: str, now: float, ago_s: float
    ) -> tuple[bool, tuple[float, EngineStats] | None]:
        """(exact, the scan's answer: (now - its time, the row) of the row closest to `ago_s`
        before `now`, at least half of it, the first the scan meets among equals). Not exact
        (the rule scans) with kept times out of order or not finite, or `now` or `ago_s` not
        finite, or `ago_s` not above zero."""
        if (
            self._dropped < self._out_of_order
            or self._not_finite
            or not math.isfinite(now)
            or not math.isfinite(ago_s)
            or not ago_s > 0
        ):
            return False, None
        rows = self._rows.get(url)
        if not rows:
            return True, None

        def back(r: _Row) -> float:
            return -(now - r[1])  # non-decreasing along `rows`: dt = now - time grows older

        half = ago_s / 2
        end = bisect_right(rows, -half, key=back)  # rows before `end`: dt >= half
        if end == 0:
            return True, None
        split = bisect_right(rows, -ago_s, 0, end, key=back)  # before `split`: dt >= ago_s
        best: int | None = None
        best_gap = 0.0
        if split < end:  # the newer side: the scan meets it first, so it wins a tie
            gap = abs((now - rows[split][1]) - ago_s)
            last = split
            while last + 1 < end and abs((now - rows[last + 1][1]) - ago_s) == gap:
                last += 1  # equal distances (rounding): the newest of them is met first
            best, best_gap = last, gap
        if split > 0:
            gap = abs((now - rows[split - 1][1]) - ago_s)
            if best is None or gap < best_gap:
                best = split - 1
        if best is None:
            return True, None
        seq = rows[best][0]
        while best > 0 and rows[best - 1][0] == seq:
            best -= 1  # the first row of that snapshot: the scan reads a snapshot's rows in order
        _, time, stats = rows[best]
        return True, (now - time, stats)


class HistoryIndex:
    """The look-backs of one history, fed as it keeps and lets go of snapshots."""

    def __init__(self) -> None:
        self.decode = DecodePeaks()
        self.held = HeldPeaks()
        self.kv = KvPeaks()
        self.past = PastRows()

    def add(self, snap: Snapshot) -> None:
        """The history has kept `snap` (its newest)."""
        self.decode.add(snap)
        self.held.add(snap)
        self.kv.add(snap)
        self.past.add(snap)

    def drop_oldest(self) -> None:
        """The history has let its oldest snapshot go."""
        self.decode.drop_oldest()
        self.held.drop_oldest()
        self.kv.drop_oldest()
        self.past.drop_oldest()
