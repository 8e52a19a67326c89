"""Reset-aware counter increments over a sliding window, read as rates, sums and histograms. A
counter that goes down was reset and counts its new value (as Prometheus' rate()); a group's
members (one histogram's buckets, sum, count) reset together. Pure: time comes in. Polls of one
layout are summed by runs, last less first (`_Window`; BENCHMARKS §10, the derive step).
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Hashable, Mapping

Key = tuple[str, Hashable]
"""(group, member): e.g. ("prompt_tokens", None) or ("ttft", 0.25) for one bucket."""


class _Layout:
    """The keys of one poll in order, each key's position, and each group's members."""

    __slots__ = ("_histograms", "counters", "groups", "index", "keys")

    def __init__(self, keys: tuple[Key, ...]) -> None:
        self.keys = keys
        self.index: dict[Key, int] = {k: i for i, k in enumerate(keys)}
        self.counters = [(k, i) for k, i in self.index.items() if k[1] is None]
        """The plain counters' keys (member None) and positions."""
        self.groups: dict[str, list[tuple[Hashable, int]]] = {}
        for i, (group, member) in enumerate(keys):
            self.groups.setdefault(group, []).append((member, i))
        self._histograms: dict[str, _HistogramLayout] = {}

    def histogram(self, group: str) -> _HistogramLayout:
        """The group read as a histogram: its numeric members as bounds, its sum and count."""
        found = self._histograms.get(group)
        if found is None:
            found = self._histograms[group] = _HistogramLayout(self.groups.get(group, []))
        return found


class _HistogramLayout:
    """Where a histogram's bounds (numeric members, as floats), sum and count sit in a layout."""

    __slots__ = ("bounds", "count", "sum")

    def __init__(self, members: list[tuple[Hashable, int]]) -> None:
        positions = dict(members)
        self.sum = positions.get("sum")
        self.count = positions.get("count")
        self.bounds = [
            (float(m), i)
            for m, i in positions.items()
            if m not in ("sum", "count") and isinstance(m, float | int)
        ]


class _Step:
    """One poll's step: its times and layout, the poll's values and its `base`, the values its
    increments start from (the previous poll's, 0 for a key new or reset at this poll)."""

    __slots__ = ("_inc", "base", "clean", "end", "layout", "run", "start", "values")

    def __init__(
        self,
        start: float,
        end: float,
        layout: _Layout,
        values: list[float],
        base: list[float],
        clean: bool,
    ) -> None:
        self.start, self.end, self.layout = start, end, layout
        self.values, self.base = values, base
        self.clean = clean
        """Whether `values` and `base` are finite."""
        self.run = 0
        """Steps of one run are clean, share a layout and had no reset after the first: a
        window within a run sums as the last step's `values` less the first's `base`."""
        self._inc: list[float] | None = None

    def increments(self) -> list[float]:
        """The poll's increment of each key, in its layout's order."""
        if self._inc is None:
            self._inc = list(map(operator.sub, self.values, self.base))
        return self._inc


class _Window:
    """The steps of one window, and every key's sum over them when they share a layout: each run's
    last less first (exact for integer counters, the last bits for float sums); else (a layout
    changed, a non-finite value) each step's increments, summed key by key."""

    __slots__ = ("counters", "incs", "layout", "span", "steps", "sums")

    def __init__(self, steps: list[_Step]) -> None:
        self.steps = steps
        self.span = None if not steps else steps[-1].end - steps[0].start
        """Seconds the steps cover (None before two scrapes)."""
        self.layout: _Layout | None = None
        self.sums: list[float] | None = None
        self.incs: list[list[float]] = []
        """Each step's increments, where the window is read key by key (`sums` None)."""
        if not steps:
            pass
        elif steps[0].run == steps[-1].run and steps[-1].clean:  # one run: last - first
            self.layout = steps[-1].layout
            self.sums = list(map(operator.sub, steps[-1].values, steps[0].base))
        elif all(s.clean and s.layout is steps[0].layout for s in steps):  # runs: each's, added
            self.layout = steps[0].layout
            self.sums = _sum_of_runs(steps)
        else:
            self.incs = [s.increments() for s in steps]
        self.counters: dict[Key, float] | None = None
        """The plain counters' increases, once asked for (`CounterWindow.counter_deltas`)."""


def _sum_of_runs(steps: list[_Step]) -> list[float]:
    """Each key's sum over clean steps of one layout: each run's last - first, the runs'
    differences added oldest first."""
    parts, start = [], 0
    for i, step in enumerate(steps):
        if i + 1 == len(steps) or steps[i + 1].run != step.run:
            parts.append(list(map(operator.sub, step.values, steps[start].base)))
            start = i + 1
    total = parts[0]
    for part in parts[1:]:
        total = list(map(operator.add, total, part))
    return total


class CounterWindow:
    """Reset-aware increments of named counters, kept for `keep_s` seconds."""

    def __init__(self, keep_s: float = 600.0) -> None:
        self.keep_s = keep_s
        self._layout: _Layout | None = None
        self._prev: list[float] | None = None
        """The previous poll's values, in the order of `_layout`."""
        self._prev_time: float | None = None
        self._clean = False
        """Whether the previous poll's values are finite."""
        self._run = 0
        self._open = False
        """Whether the next step of the same layout may join run `_run`."""
        self._steps: deque[_Step] = deque()
        self._last_window: tuple[float, _Step, _Window] | None = None
        """(window_s, latest step, its window): one derive asks for the same window ~25 times."""

    def add(self, t: float, values: Mapping[Key, float]) -> None:
        """Record one scrape's cumulative values at time `t` (seconds)."""
        self.add_columns(t, tuple(values), list(values.values()))

    def add_columns(self, t: float, keys: tuple[Key, ...], vals: list[float]) -> None:
        """`add` of (keys, values in their order): `vals` is the window's from now on."""
        before = self._layout
        same = before is not None and (before.keys is keys or before.keys == keys)
        layout = before if same and before is not None else _Layout(keys)
        prev, prev_time = self._prev, self._prev_time
        finite = math.isfinite(sum(vals))  # NaN and inf make the sum non-finite
        if prev is not None and before is not None and prev_time is not None and t > prev_time:
            base = _base(layout, vals, prev) if same else _base_by_key(layout, vals, before, prev)
            step = _Step(prev_time, t, layout, vals, base, self._clean and finite)
            if step.clean and base is prev and self._open:
                step.run = self._run
            else:  # a reset, new keys, non-finite values: a run starts
                self._run += 1
                step.run = self._run
            self._open = step.clean
            self._steps.append(step)
            while self._steps and self._steps[0].end < t - self.keep_s:
                self._steps.popleft()
        else:
            if prev_time is not None and t <= prev_time:
                self._steps.clear()  # time went backwards: start over rather than divide by <= 0
            self._open = False
        self._layout = layout
        self._prev = vals
        self._prev_time = t
        self._clean = finite

    def _window(self, window_s: float) -> _Window:
        """The steps that start inside the window (at least the latest one), oldest first."""
        if not self._steps:
            return _Window([])
        latest = self._steps[-1]
        memo = self._last_window
        if memo is not None and memo[0] == window_s and memo[1] is latest:
            return memo[2]
        cutoff = latest.end - window_s - 1e-9
        out: list[_Step] = []
        for step in reversed(self._steps):
            if step.start < cutoff and out:
                break
            out.append(step)
        out.reverse()
        window = _Window(out)
        self._last_window = (window_s, latest, window)
        return window

    def span_s(self, window_s: float) -> float | None:
        """Seconds the window's increments cover (None before two scrapes)."""
        return self._window(window_s).span

    def delta(self, key: Key, window_s: float) -> float | None:
        """Increase of `key` over the window; None when it was not in two scrapes."""
        return self._delta(self._window(window_s), key)

    @staticmethod
    def _delta(w: _Window, key: Key) -> float | None:
        if w.sums is not None and w.layout is not None:
            i = w.layout.index.get(key)
            return None if i is None else w.sums[i]
        found = [
            inc[i]
            for s, inc in zip(w.steps, w.incs, strict=True)
            if (i := s.layout.index.get(key)) is not None
        ]
        return sum(found) if found else None

    def counter_deltas(self, window_s: float) -> dict[Key, float]:
        """`delta` of every plain counter (member None) the window has, in one dict: one
        derive reads a dozen of them."""
        w = self._window(window_s)
        if w.counters is None:
            if w.sums is not None and w.layout is not None:
                sums = w.sums
                w.counters = {key: sums[i] for key, i in w.layout.counters}
            else:  # as `_delta` adds each key up: over the steps that have it, oldest first
                found: dict[Key, list[float]] = {}
                for step, inc in zip(w.steps, w.incs, strict=True):
                    for key, i in step.layout.counters:
                        found.setdefault(key, []).append(inc[i])
                w.counters = {key: sum(incs) for key, incs in found.items()}
        return w.counters

    def rate(self, key: Key, window_s: float) -> float | None:
        """Per-second increase over the window; None when unknown."""
        w = self._window(window_s)
        d, span = self._delta(w, key), w.span
        return None if d is None or not span else d / span

    def histogram(self, group: str, window_s: float) -> Histogram:
        """The group as a histogram over the window: (bound, increment) for each numeric
        member, and the "sum" and "count" members (None when absent), as `group` gives them."""
        w = self._window(window_s)
        if w.sums is not None and w.layout is not None:
            sums, h = w.sums, w.layout.histogram(group)
            return (
                [(le, sums[i]) for le, i in h.bounds],
                None if h.sum is None else sums[h.sum],
                None if h.count is None else sums[h.count],
            )
        members = self.group(group, window_s)
        total, count = members.pop("sum", None), members.pop("count", None)
        bounds = [(float(le), c) for le, c in members.items() if isinstance(le, float | int)]
        return bounds, total, count

    def group(self, group: str, window_s: float) -> dict[Hashable, float]:
        """Summed increments of every member of `group` over the window."""
        w = self._window(window_s)
        if w.sums is not None and w.layout is not None:
            sums = w.sums
            return {member: sums[i] for member, i in w.layout.groups.get(group, ())}
        found: dict[Hashable, list[float]] = {}
        for s, inc in zip(w.steps, w.incs, strict=True):
            for member, i in s.layout.groups.get(group, ()):
                found.setdefault(member, []).append(inc[i])
        return {member: sum(incs) for member, incs in found.items()}


Histogram = tuple[list[tuple[float, float]], float | None, float | None]
"""(bounds with their summed increments, in the members' order; sum; count) of a window."""


def _base(layout: _Layout, values: list[float], prev: list[float]) -> list[float]:
    """Where a poll's increments start from: the previous poll's values (that very list), or
    where a group has a member that went down (reset), a copy with 0 for its members, which
    then count their new values."""
    if not any(map(operator.lt, values, prev)):
        return prev
    keys, base = layout.keys, list(prev)
    reset = {keys[i][0] for i, (v, p) in enumerate(zip(values, prev, strict=True)) if v < p}
    for group in reset:
        for _, i in layout.groups[group]:
            base[i] = 0.0
    return base


def _base_by_key(
    layout: _Layout, values: list[float], before: _Layout, prev: list[float]
) -> list[float]:
    """`_base` when the keys changed: a key new since the previous poll counts its value."""
    old = dict(zip(before.keys, prev, strict=True))
    pairs = list(zip(layout.keys, values, strict=True))
    reset = {k[0] for k, v in pairs if k in old and v < old[k]}
    return [0.0 if k[0] in reset or k not in old else old[k] for k, _ in pairs]
