"""peaks: the rules' indexed look-backs answer exactly as the scans of the history."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.derive.peaks import DecodePeaks, HistoryIndex, scan_best_at_half
from llmtop.core.health.kvsize import _held
from llmtop.core.health.rulebase import Context, kv_peak
from llmtop.core.health.rules_engine import _cliff_inputs, _past
from llmtop.core.health.thresholds import HealthSettings

URLS = ("http://a", "http://b")

_row = st.tuples(
    st.sampled_from(URLS),
    st.sampled_from([None, 0.0, 1.0, 2.0, 2, 3.0, 4.0, 8.0, -1.0, math.nan, math.inf]),  # running
    st.sampled_from([None, 0.0, -0.0, 5.0, 5.0, 7.5, 12.0, -3.0, math.inf, math.nan]),  # rate
)


@given(
    st.lists(st.lists(_row, max_size=3), min_size=1, max_size=40),
    st.integers(1, 12),
    st.sampled_from([1.0, 2.0, 4.0, 8.0, 16.0, math.inf, math.nan]),
)
def test_index_answers_as_the_scan(
    polls: list[list[tuple[str, float | None, float | None]]], keep: int, running_now: float
) -> None:
    """Whatever the rows (several per URL, none, unknown, zero, negative, equal, infinite or
    NaN rates), while the history slides: the same snapshot as the scan, or the index says
    it is not exact and the rule scans."""
    peaks, history = DecodePeaks(), deque[Snapshot]()
    for t, rows in enumerate(polls):
        engines = tuple(
            EngineStats(url=u, up=True, running=r, decode_tok_per_s_per_seq=rate)
            for u, r, rate in rows
        )
        snap = Snapshot(time=float(t), engines=engines)
        history.append(snap)
        peaks.add(snap)
        while len(history) > keep:
            history.popleft()
            peaks.drop_oldest()
        for url in URLS:
            now = EngineStats(url=url, up=True, running=running_now)
            want = scan_best_at_half(tuple(history), now)
            has_nan = any(
                p.url == url
                and p.running
                and not math.isnan(p.running)
                and p.decode_tok_per_s_per_seq is not None
                and math.isnan(p.decode_tok_per_s_per_seq)
                for s in history
                for p in s.engines
            )
            assert peaks.exact(url) is not has_nan
            if peaks.exact(url):
                assert peaks.best_at_half(url, running_now) is want


_kv_row = st.tuples(
    st.sampled_from(URLS),
    st.booleans() | st.just(True),  # up
    st.sampled_from([None, 0.0, 0.5, 0.9, 1.0, 1.0] * 20 + [math.nan]),  # KV usage
    st.sampled_from([None, 0, 4096, 4096, 8192]),  # capacity
    st.sampled_from([None, 0.0, -1.0, 1.0, 2.0, 4.0, 4.0] * 20 + [math.nan]),  # running
)
"""Rows of either URL; a NaN is rare, as it keeps the index from answering for its URL."""


Row = tuple[str, bool, float | None, int | None, float | None]


Engines = tuple[EngineStats, ...]
History = tuple[Snapshot, ...]


def _replay(
    polls: Iterable[tuple[float, Engines]],
    keep: int,
    check: Callable[[float, Engines, History, HistoryIndex], None],
    start: float = 0.0,
) -> None:
    """Keep each poll's snapshot as a pipeline does (the history and its index side by side,
    the oldest let go past `keep`), `check` running first, before the snapshot is kept."""
    index, history = HistoryIndex(), deque[Snapshot]()
    t = start
    for dt, engines in polls:
        t += dt
        check(t, engines, tuple(history), index)
        snap = Snapshot(time=t, engines=engines)
        history.append(snap)
        index.add(snap)
        while len(history) > keep:
            history.popleft()
            index.drop_oldest()


def _rows_and_blank(engines: tuple[EngineStats, ...]) -> Iterator[EngineStats]:
    """Each URL's rows of the poll, then a row of it that knows nothing."""
    for url in URLS:
        yield from (p for p in engines if p.url == url)
        yield EngineStats(url=url, up=True)


def _replay_kv_held(polls: list[tuple[float, list[Row]]], keep: int) -> None:
    """At each poll, before its snapshot is kept: the index's answer is the scan's, for each
    row of the poll and for a row that knows nothing."""

    def check(t: float, engines: Engines, history: History, index: HistoryIndex) -> None:
        for e in _rows_and_blank(engines):
            assert repr(_held(e, history, t, index.held)) == repr(_held(e, history, t))

    engines = (
        (
            dt,
            tuple(
                EngineStats(
                    url=u, up=up, kv_cache_usage_frac=usage, kv_capacity_tokens=cap, running=running
                )
                for u, up, usage, cap, running in rows
            ),
        )
        for dt, rows in polls
    )
    _replay(engines, keep, check)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([1.0] * 8 + [0.5, 7.0, 30.0, -5.0, -70.0]),  # seconds to this poll
            st.lists(_kv_row, max_size=3),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 90),
)
@settings(max_examples=300)
def test_kv_held_index_answers_as_the_scan(polls: list[tuple[float, list[Row]]], keep: int) -> None:
    """Whatever the rows (up or not, unknown, zero, negative, equal or NaN figures) and the
    time (mostly moving on, sometimes stepping back), as the history slides."""
    _replay_kv_held(polls, keep)


def _steady(n: int, dt: float = 1.0, first_high: int = 10) -> list[tuple[float, list[Row]]]:
    """n polls of one URL, the one at index `first_high` holding the most KV by far."""
    return [
        (
            dt,
            [
                (
                    URLS[0],
                    True,
                    1.0 if i == first_high else 0.1,
                    4096,
                    1.0 if i == first_high else 4.0,
                )
            ],
        )
        for i in range(n)
    ]


def test_kv_held_after_the_clock_steps_back() -> None:
    """A poll before the newest kept snapshot, then polls while that snapshot is still kept:
    the scan reaches rows the index had let go as too old, so the rule scans."""
    polls = _steady(100)
    polls.append((-61.0, [(URLS[0], True, 0.1, 4096, 4.0)]))
    polls += [(1.0, [(URLS[0], True, 0.1, 4096, 4.0)]) for _ in range(20)]
    _replay_kv_held(polls, keep=200)


def test_kv_held_look_back_ends_where_the_scan_ends() -> None:
    """Polls half a second apart: the row of the most KV leaves the look-back on the poll
    60 s after it, not a poll later."""
    _replay_kv_held(_steady(200, dt=0.5), keep=300)


_usage_row = st.tuples(
    st.sampled_from(URLS),
    st.booleans() | st.just(True),  # up
    st.sampled_from([None, 0.0, -0.0, 0.5, 0.9, 1.0, 1, math.inf] * 10 + [math.nan]),
)


def _replay_kv_peak(
    polls: list[tuple[float, list[tuple[str, bool, float | None]]]], keep: int, window_s: float
) -> None:
    """At each poll, before its snapshot is kept: `kv_peak` with the index is `kv_peak`'s scan,
    for each row of the poll and for a row that knows nothing (repr: a -0.0 or NaN shows)."""
    settings = HealthSettings(window_s=window_s)

    def check(t: float, engines: Engines, history: History, index: HistoryIndex) -> None:
        for e in _rows_and_blank(engines):
            seen = {"time": t, "engines": (e,), "gateway": None, "gpus": ()}
            scan = Context(**seen, settings=settings, history=history)
            indexed = replace(scan, history_index=index)
            assert repr(kv_peak(indexed, e)) == repr(kv_peak(scan, e))

    engines = (
        (dt, tuple(EngineStats(url=u, up=up, kv_cache_usage_frac=v) for u, up, v in rows))
        for dt, rows in polls
    )
    _replay(engines, keep, check)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([1.0] * 8 + [0.5, 0.0, 7.0, 30.0, -5.0, -70.0]),  # seconds to this poll
            st.lists(_usage_row, max_size=3),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 40),
    st.sampled_from([1.0, 3.0, 10.0, 10.0, 25.0]),
)
@settings(max_examples=400)
def test_kv_peak_index_answers_as_the_scan(
    polls: list[tuple[float, list[tuple[str, bool, float | None]]]], keep: int, window_s: float
) -> None:
    """Whatever the rows (up or not, unknown, equal, signed zeros, infinite or NaN usage) and
    the time (mostly moving on, sometimes standing or stepping back, gaps past the window), as
    the history slides: the index answers as the scan, or says it cannot and the rule scans."""
    _replay_kv_peak(polls, keep, window_s)


def test_kv_peak_index_lets_the_peak_leave_the_window() -> None:
    """A full cache, then a calm one for longer than the window: the peak drops to the calm
    usage on the poll the full one leaves the window, as the scan's does (not a poll late)."""
    polls = [(1.0, [(URLS[0], True, 1.0 if i == 3 else 0.2)]) for i in range(30)]
    _replay_kv_peak(polls, keep=200, window_s=10.0)
    index = HistoryIndex()
    for i, (_, rows) in enumerate(polls):
        index.add(
            Snapshot(
                time=float(i),
                engines=tuple(
                    EngineStats(url=u, up=up, kv_cache_usage_frac=v) for u, up, v in rows
                ),
            )
        )
    assert index.kv.peak(URLS[0], 3.0) == (True, 1.0)
    assert index.kv.peak(URLS[0], 4.0) == (True, 0.2)
    assert index.kv.peak(URLS[0], 3.0) == (False, None)  # let go already: the scan answers


_cliff_row = st.tuples(
    st.sampled_from(URLS),
    st.booleans() | st.just(True),  # up
    st.sampled_from([None, 0.0, 3.0, 40.0]),  # waiting
    st.sampled_from([None, 100.0, 0.0]),  # decode tok/s
)


def _replay_past(
    polls: list[tuple[float, list[tuple[str, bool, float | None, float | None]]]],
    keep: int,
    ago_s: float,
    start: float,
) -> None:
    """At each poll, before its snapshot is kept: `_past` through the index finds the very
    row the scan finds (the same object, the same dt)."""

    def check(t: float, engines: Engines, history: History, index: HistoryIndex) -> None:
        for url in URLS:
            seen = {"time": t, "engines": (), "gateway": None, "gpus": ()}
            scan = Context(**seen, settings=HealthSettings(), history=history)
            want = _past(scan, url, ago_s, _cliff_inputs)
            got = _past(replace(scan, history_index=index), url, ago_s, _cliff_inputs)
            assert repr(got) == repr(want)
            assert (got is None) == (want is None)
            if got is not None and want is not None:
                assert got[1] is want[1]

    engines = (
        (
            dt,
            tuple(EngineStats(url=u, up=up, waiting=w, decode_tok_per_s=d) for u, up, w, d in rows),
        )
        for dt, rows in polls
    )
    _replay(engines, keep, check, start)


@given(
    st.lists(
        st.tuples(
            # seconds to this poll: mostly a second; standing still, fractions whose sums
            # round, a step back, a gap past the look-back
            st.sampled_from([1.0] * 8 + [0.0, 0.1, 0.3, 0.5, 2.5, 7.0, -3.0, 40.0]),
            st.lists(_cliff_row, max_size=3),
        ),
        min_size=1,
        max_size=50,
    ),
    st.integers(1, 40),
    st.sampled_from([10.0, 10.0, 3.0, 2.0, 0.7, 0.0, -1.0, math.inf, math.nan]),
    st.sampled_from([0.0, 1_764_000_000.1, 1e17]),
)
@settings(max_examples=500)
def test_past_index_finds_the_scans_row(
    polls: list[tuple[float, list[tuple[str, bool, float | None, float | None]]]],
    keep: int,
    ago_s: float,
    start: float,
) -> None:
    """Whatever the rows (up or not, known or not, several per URL), the times (standing,
    rounding at epoch scale and beyond, stepping back, gaps) and the look-back: the index's
    row is the scan's, or it says it cannot answer and the rule scans."""
    _replay_past(polls, keep, ago_s, start)


def test_past_index_answers_in_a_steady_run() -> None:
    """Polls a second apart: the index answers (it is exact) with the row a window ago."""
    index = HistoryIndex()
    for i in range(30):
        engines = (EngineStats(url=URLS[0], up=True, waiting=float(i), decode_tok_per_s=1.0),)
        index.add(Snapshot(time=float(i), engines=engines))
    exact, found = index.past.closest(URLS[0], 30.0, 10.0)
    assert exact
    assert found is not None
    assert found[0] == 10.0
    assert found[1].waiting == 20.0
    polls = [(1.0, [(URLS[0], True, float(i), 1.0), (URLS[0], True, 0.0, 1.0)]) for i in range(40)]
    _replay_past(polls, keep=25, ago_s=10.0, start=0.0)
