"""series and histogram: reset-aware counter windows and PromQL histogram_quantile semantics."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from llmtop.core.derive.histogram import (
    Buckets,
    histogram_quantile,
)
from llmtop.core.derive.series import CounterWindow, Key

INF = math.inf
K = ("tokens", None)


def test_rate_over_steady_counter() -> None:
    w = CounterWindow()
    for i in range(6):
        w.add(float(i), {K: 100.0 * i})
    assert w.rate(K, 10.0) == pytest.approx(100.0)
    assert w.span_s(10.0) == pytest.approx(5.0)


def test_rate_unknown_before_two_scrapes() -> None:
    w = CounterWindow()
    w.add(0.0, {K: 5.0})
    assert w.rate(K, 10.0) is None
    assert w.span_s(10.0) is None


def test_counter_reset_counts_the_new_value() -> None:
    w = CounterWindow()
    w.add(0.0, {K: 1000.0})
    w.add(1.0, {K: 1100.0})
    w.add(2.0, {K: 30.0})  # restarted: 30 since the restart
    w.add(3.0, {K: 130.0})
    assert w.delta(K, 10.0) == pytest.approx(100 + 30 + 100)
    assert w.rate(K, 10.0) == pytest.approx(230 / 3)


def test_window_drops_old_increments() -> None:
    w = CounterWindow()
    w.add(0.0, {K: 0.0})
    w.add(1.0, {K: 1000.0})  # a burst long ago
    for t in range(2, 22):
        w.add(float(t), {K: 1000.0 + 10 * (t - 1)})
    assert w.rate(K, 10.0) == pytest.approx(10.0)


def test_group_reset_resets_every_member() -> None:
    w = CounterWindow()
    w.add(0.0, {("h", 0.1): 10.0, ("h", INF): 20.0})
    w.add(1.0, {("h", 0.1): 15.0, ("h", INF): 5.0})  # +Inf fell: the histogram restarted
    assert w.group("h", 10.0) == {0.1: 15.0, INF: 5.0}


def test_new_series_counts_from_zero_and_time_backwards_starts_over() -> None:
    w = CounterWindow()
    w.add(0.0, {K: 1.0})
    w.add(1.0, {K: 2.0, ("late", None): 7.0})
    assert w.delta(("late", None), 10.0) == 7.0
    w.add(0.5, {K: 3.0})
    assert w.rate(K, 10.0) is None


def test_quantile_interpolates_like_promql() -> None:
    buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (INF, 40.0)]
    # rank 20 -> bucket (0.1, 0.5], 10 of 20 in it: 0.1 + 0.4 * 10/20
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.3)
    # lowest bucket interpolates from 0: rank 4 of 10 in (0, 0.1]
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.04)


def test_quantile_in_inf_bucket_returns_last_finite_bound() -> None:
    assert histogram_quantile(0.99, [(0.1, 1.0), (1.0, 2.0), (INF, 10.0)]) == 1.0


def test_quantile_empty_or_invalid_is_unknown() -> None:
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    assert histogram_quantile(0.5, [(0.1, 3.0), (1.0, 4.0)]) is None  # no +Inf


def test_quantile_bounds() -> None:
    b = [(1.0, 1.0), (INF, 1.0)]
    assert histogram_quantile(-0.1, b) == -INF
    assert histogram_quantile(1.5, b) == INF
    assert histogram_quantile(0.5, [(-1.0, 5.0), (INF, 5.0)]) == -1.0


def _lands_in_first(q: float, buckets: list[tuple[float, float]]) -> bool:
    """Whether the q-quantile falls in the lowest bucket, read plainly: what `quantiles` caps."""
    ordered = sorted(buckets)
    return bool(ordered) and (peak := max(c for _, c in ordered)) > 0 and ordered[0][1] >= q * peak


def test_a_quantile_in_the_first_bucket_reads_the_cap() -> None:
    assert Buckets([(0.01, 100.0), (0.1, 100.0), (INF, 100.0)]).quantiles([0.95], 7.0) == [7.0]
    assert Buckets([(0.01, 50.0), (0.1, 100.0), (INF, 100.0)]).quantiles([0.95], 7.0) != [7.0]


@given(
    st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=12),
    st.floats(0, 1, allow_nan=False),
)
@example(increments=[2.2250738585072014e-308], q=1.0)  # subnormal counts: found by CI
def test_quantile_stays_within_bucket_bounds(increments: list[float], q: float) -> None:
    bounds = [0.01 * 2**i for i in range(len(increments))] + [INF]
    counts, total = [], 0.0
    for inc in [*increments, 0.0]:
        total += inc
        counts.append(total)
    v = histogram_quantile(q, list(zip(bounds, counts, strict=True)))
    if total == 0:
        assert v is None
    else:
        assert v is not None
        assert 0.0 <= v <= bounds[-2]


@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=40))
def test_rates_never_negative_whatever_the_resets(values: list[int]) -> None:
    w = CounterWindow()
    for t, v in enumerate(values):
        w.add(float(t), {K: float(v)})
        rate = w.rate(K, 5.0)
        assert rate is None or rate >= 0.0


class _KeyByKey:
    """The window as a plain dict of increments per poll, summed key by key: the oracle for
    CounterWindow's shared layouts and all-at-once column sums."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.prev: dict[Key, float] | None = None
        self.prev_time: float | None = None
        self.steps: list[tuple[float, float, dict[str, dict[object, float]]]] = []

    def add(self, t: float, values: Mapping[Key, float]) -> None:
        if self.prev is not None and self.prev_time is not None and t > self.prev_time:
            prev = self.prev
            reset = {k[0] for k, v in values.items() if k in prev and v < prev[k]}
            inc: dict[str, dict[object, float]] = {}
            for (group, member), v in values.items():
                fresh = group in reset or (group, member) not in prev
                inc.setdefault(group, {})[member] = v if fresh else v - prev[(group, member)]
            self.steps.append((self.prev_time, t, inc))
            self.steps = [s for s in self.steps if not s[1] < t - self.keep_s]
        elif self.prev_time is not None and t <= self.prev_time:
            self.steps = []
        self.prev, self.prev_time = dict(values), t

    def window(self, window_s: float) -> list[tuple[float, float, dict[str, dict[object, float]]]]:
        if not self.steps:
            return []
        cutoff = self.steps[-1][1] - window_s - 1e-9
        out: list[tuple[float, float, dict[str, dict[object, float]]]] = []
        for step in reversed(self.steps):
            if step[0] < cutoff and out:
                break
            out.append(step)
        return out[::-1]

    def delta(self, key: tuple[str, object], window_s: float) -> float | None:
        group, member = key
        found = [
            s[2][group][member] for s in self.window(window_s) if member in s[2].get(group, {})
        ]
        return sum(found) if found else None

    def group(self, group: str, window_s: float) -> dict[object, float]:
        found: dict[object, list[float]] = {}
        for _, _, inc in self.window(window_s):
            for member, v in inc.get(group, {}).items():
                found.setdefault(member, []).append(v)
        return {member: sum(incs) for member, incs in found.items()}


_KEYS = [("a", None), ("h", 0.1), ("h", 1.0), ("h", INF), ("h", "sum"), ("b", None)]
_ALL = [True] * len(_KEYS)
_PRESENT = [_ALL, _ALL, _ALL, _ALL, [*_ALL[:-1], False], [True, True, False, True, True, True]]
"""Which keys a poll has: mostly all (one layout, summed all at once), sometimes one gone."""


def _close(got: object, want: object, scale: float, exact: bool) -> bool:
    """Equal (exact: bit for bit), or within a few ulps of the largest cumulative value seen
    (`scale`): last - first rounds once a run where the key-by-key sum rounds at every poll."""
    if exact or not isinstance(want, float) or not isinstance(got, float):
        return repr(got) == repr(want)
    return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-13 * scale)


def _same_sums(
    polls: list[tuple[float, list[bool], list[float], bool]], window_s: float, exact: bool
) -> None:
    w, oracle = CounterWindow(keep_s=8.0), _KeyByKey(keep_s=8.0)
    t = 0.0
    growing = [0.0] * len(_KEYS)
    scale = 0.0
    for dt, present, steps, reverse in polls:
        t += dt
        for i, s in enumerate(steps):
            growing[i] += abs(s) if s < 5e8 else -s  # mostly counting up, sometimes a reset
        scale += sum(map(abs, growing))  # bounds every adjusted value and partial sum
        values: dict[Key, float] = {k: growing[i] for i, k in enumerate(_KEYS) if present[i]}
        if reverse:
            values = dict(reversed(values.items()))
        w.add(t, values)
        oracle.add(t, values)
        for key in _KEYS:
            assert _close(w.delta(key, window_s), oracle.delta(key, window_s), scale, exact)
        for group in ("a", "h", "b", "none"):
            got, want = w.group(group, window_s), oracle.group(group, window_s)
            assert list(got) == list(want)
            assert all(_close(got[m], want[m], scale, exact) for m in want)
            members = oracle.group(group, window_s)
            total, count = members.pop("sum", None), members.pop("count", None)
            bounds = [(float(m), c) for m, c in members.items() if isinstance(m, float | int)]
            h_bounds, h_total, h_count = w.histogram(group, window_s)
            assert [le for le, _ in h_bounds] == [le for le, _ in bounds]
            assert all(
                _close(a[1], b[1], scale, exact) for a, b in zip(h_bounds, bounds, strict=True)
            )
            assert _close(h_total, total, scale, exact)
            assert _close(h_count, count, scale, exact)
        span = w.span_s(window_s)
        steps_ = oracle.window(window_s)
        assert span == (steps_[-1][1] - steps_[0][0] if steps_ else None)


_POLLS = st.tuples(
    st.sampled_from([0.0, 0.5, 1.0, 1.0, 1.0, 2.5, -0.5]),  # time step (back: restart)
    st.sampled_from(_PRESENT),
    st.lists(
        st.floats(-1e6, 1e9, allow_nan=False) | st.floats(0, 1000).map(round),
        min_size=len(_KEYS),
        max_size=len(_KEYS),
    ),
    st.sampled_from([False] * 5 + [True]),  # keys in the other order
)


@given(st.lists(_POLLS, min_size=1, max_size=40), st.sampled_from([1.0, 3.0, 10.0]))
def test_window_sums_equal_a_key_by_key_sum(
    polls: list[tuple[float, list[bool], list[float], bool]], window_s: float
) -> None:
    """Whatever the keys do (appear, go, change order, reset, time going back), every delta
    and group equals the plain key-by-key sum within a few ulps of the counters' size."""
    _same_sums(polls, window_s, exact=False)


@given(st.lists(_POLLS, min_size=1, max_size=40), st.sampled_from([1.0, 3.0, 10.0]))
def test_window_sums_of_integer_counters_are_exact(
    polls: list[tuple[float, list[bool], list[float], bool]], window_s: float
) -> None:
    """Integer counts (vLLM's tokens and requests): last - first is the key-by-key sum, bit
    for bit, whatever the resets and layouts."""
    whole = [
        (dt, present, [float(round(v)) for v in vals], rev) for dt, present, vals, rev in polls
    ]
    _same_sums(whole, window_s, exact=True)


_H = [("h", 0.1), ("h", 1.0), ("h", INF), ("h", "sum"), ("h", "count")]


def _fake_engine(
    polls: int, restart_at: set[int], new_reason_at: int | None
) -> list[dict[Key, float]]:
    """A vLLM-like engine's counters at 1 Hz: integer tokens and counts, a float seconds sum;
    a restart sends them back to small values; a finish reason may appear."""
    out = []
    tokens, count, total, buckets = 0.0, 0.0, 0.0, [0.0, 0.0, 0.0]
    for i in range(polls):
        if i in restart_at:
            tokens, count, total, buckets = 0.0, 0.0, 0.0, [0.0, 0.0, 0.0]
        tokens += 1000.0 + 37 * (i % 7)
        count += 3.0
        total += 0.1 * (1 + i % 5) + 0.0123456789 * i  # seconds: not integers
        buckets = [buckets[0] + 1.0, buckets[1] + 2.0, buckets[2] + 3.0]
        values: dict[Key, float] = {K: tokens, ("finished:stop", None): count}
        if new_reason_at is not None and i >= new_reason_at:
            values[("finished:length", None)] = float(i - new_reason_at + 1)
        values.update(zip(_H, [*buckets, total, count], strict=True))
        out.append(values)
    return out


@pytest.mark.parametrize(
    ("restart_at", "new_reason_at", "window_s"),
    [
        (set(), None, 10.0),  # no reset: one run, the window shorter than the history
        ({14}, None, 10.0),  # a reset inside the window
        ({3}, None, 10.0),  # a reset before the window
        ({3, 9, 16}, None, 5.0),  # resets before, at the window's start and inside
        (set(), 8, 10.0),  # a series appears, then the same layout again
        ({8}, 8, 10.0),  # a series appears at a restart
        ({11}, 5, 30.0),  # the window longer than the history
    ],
)
def test_last_minus_first_equals_key_by_key_on_a_fake_clock(
    restart_at: set[int], new_reason_at: int | None, window_s: float
) -> None:
    """Integer counters exactly, the seconds sum within rel 1e-12, at every poll."""
    w, oracle = CounterWindow(keep_s=20.0), _KeyByKey(keep_s=20.0)
    keys = [K, ("finished:stop", None), ("finished:length", None), *_H]
    for i, values in enumerate(_fake_engine(30, restart_at, new_reason_at)):
        t = 100.0 + i
        w.add(t, values)
        oracle.add(t, values)
        for key in keys:
            got, want = w.delta(key, window_s), oracle.delta(key, window_s)
            if key == ("h", "sum") and got is not None and want is not None:
                assert math.isclose(got, want, rel_tol=1e-12)
            else:
                assert repr(got) == repr(want)
        steps = oracle.window(window_s)
        assert w.span_s(window_s) == (steps[-1][1] - steps[0][0] if steps else None)


def test_non_finite_values_read_key_by_key_then_clean_again() -> None:
    """A NaN or inf poll makes the windows holding it NaN, as the per-poll sum would; once it
    leaves the window the sums are finite again, resets after it included."""
    w, oracle = CounterWindow(keep_s=20.0), _KeyByKey(keep_s=20.0)
    values = [0.0, 10.0, 20.0, math.nan, 40.0, 50.0, 5.0, 15.0, INF, 25.0, 35.0, 45.0, 55.0]
    values += [65.0, 1.0, 2.0, 3.0]
    for i, v in enumerate(values):
        poll: dict[Key, float] = {K: v, ("b", None): float(i)}
        w.add(float(i), poll)
        oracle.add(float(i), poll)
        for window_s in (1.0, 3.0, 6.0):
            assert repr(w.delta(K, window_s)) == repr(oracle.delta(K, window_s))
            assert repr(w.delta(("b", None), window_s)) == repr(oracle.delta(("b", None), window_s))
    assert w.delta(K, 3.0) == 1.0 + 1.0 + 1.0  # 65 -> 1 (a reset: 1), 2, 3
    assert w._window(3.0).sums is not None  # read as last - first again


def _quantile_bucket_by_bucket(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile written plainly: the oracle for Buckets' shortcuts (counts
    taken as their own running max when they never fall, the rank found by bisection)."""
    if not buckets or math.isnan(q):
        return None
    ordered = sorted(buckets)
    if not math.isinf(ordered[-1][0]):
        return None
    counts: list[float] = []
    running = 0.0
    for _, c in ordered:
        running = max(running, c)
        counts.append(running)
    total = counts[-1]
    if total <= 0:
        return None
    if q < 0:
        return -INF
    if q > 1:
        return INF
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
    return lower + (upper - lower) * min(1.0, max(0.0, (rank - below) / in_bucket))


_count = st.sampled_from([0.0, -0.0, 1.0, 2.0, 2.0, 5.0, 1e-300, INF]) | st.floats(-1, 100)


@given(
    st.lists(st.tuples(st.sampled_from([0.0, -1.0, 0.1, 0.5, 1.0, 2.5, INF]), _count), max_size=8),
    st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0, -0.1, 1.5]),
    st.booleans(),
)
@example(buckets=[(0.1, -0.5), (1.0, 1.0), (INF, 2.0)], q=0.0, cumulative=False)  # below 0
@example(buckets=[(0.1, -0.0), (1.0, 0.0), (INF, 2.0)], q=0.0, cumulative=False)  # signed 0s
def test_quantiles_equal_the_plain_reading(
    buckets: list[tuple[float, float]], q: float, cumulative: bool
) -> None:
    """Cumulative or dipping counts, zeros of either sign, an infinite count: the same
    quantile, bit for bit."""
    if cumulative:  # counts that never fall, as a window's buckets mostly are
        counts = sorted(c for _, c in buckets)
        buckets = list(zip(sorted(le for le, _ in buckets), counts, strict=True))
    try:
        want = repr(_quantile_bucket_by_bucket(q, buckets))
    except StopIteration:
        with pytest.raises(StopIteration):
            histogram_quantile(q, buckets)
        return
    assert repr(histogram_quantile(q, buckets)) == want


@given(
    st.lists(st.tuples(st.sampled_from([0.0, -1.0, 0.1, 0.5, 1.0, 2.5, INF]), _count), max_size=8),
    st.lists(st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0, -0.1, 1.5, math.nan]), max_size=4),
    st.sampled_from([None, 0.004, 0.0, math.nan]),
    st.booleans(),
)
def test_several_quantiles_at_once_equal_one_at_a_time(
    buckets: list[tuple[float, float]], qs: list[float], cap: float | None, cumulative: bool
) -> None:
    """`Buckets.quantiles(qs, cap)` (derive's reading): for each q, the cap where the q lands
    in the first bucket, else the plain quantile, bit for bit."""
    if cumulative:
        counts = sorted(c for _, c in buckets)
        buckets = list(zip(sorted(le for le, _ in buckets), counts, strict=True))
    try:
        want = [
            cap
            if cap is not None and _lands_in_first(q, buckets)
            else _quantile_bucket_by_bucket(q, buckets)
            for q in qs
        ]
    except StopIteration:
        with pytest.raises(StopIteration):
            Buckets(buckets).quantiles(qs, cap)
        return
    assert repr(Buckets(buckets).quantiles(qs, cap)) == repr(want)
