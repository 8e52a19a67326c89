"""peaks: decode-bound's indexed look-back answers exactly as the scan of the history."""

from __future__ import annotations

import math
from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.peaks import DecodePeaks, scan_best_at_half
from llmtop.core.snapshot import EngineStats, Snapshot

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
