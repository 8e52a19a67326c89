"""The look-backs kept as polls come in (core/derive/sliding_max.py, core/health/kv_maxima.py):
what each answers, on a fake clock."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.derive.sliding_max import SlidingMax
from llmtop.core.health.kv_maxima import KvMaxima
from llmtop.core.health.rulebase import Context, kv_peak
from llmtop.core.health.thresholds import HealthSettings

_POLLS = st.lists(
    st.tuples(
        st.floats(0.0, 3.0),  # seconds since the poll before
        st.sampled_from(["a", "b"]),
        st.sampled_from([0.1, 0.5, 0.5, 0.9, 1.0, math.nan]),
    ),
    max_size=60,
)


@given(_POLLS, st.floats(1.0, 20.0), st.floats(0.0, 20.0))
def test_the_most_of_the_window_newest_of_equals(
    polls: list[tuple[float, str, float]], keep_s: float, back_s: float
) -> None:
    """Against the definition: of the values added at `since` or later (and within `keep_s`
    of the latest add), the highest, the newest of equals; NaN is no value."""
    window: SlidingMax[int] = SlidingMax(keep_s)
    t, added = 0.0, []
    for step, (dt, url, value) in enumerate(polls):
        t += dt
        window.add(url, t, value, step)
        added.append((t, url, value, step))
        since = max(t - back_s, t - keep_s)
        for asked in ("a", "b"):
            rows = [r for r in added if r[1] == asked and r[0] >= since and not math.isnan(r[2])]
            want = None
            if rows:
                top = max(r[2] for r in rows)
                newest = [r for r in rows if r[2] == top][-1]
                want = (newest[0], newest[2], newest[3])
            assert window.most(asked, since) == want


def test_time_stepping_back_starts_over() -> None:
    window: SlidingMax[None] = SlidingMax(60.0)
    window.add("a", 100.0, 0.9, None)
    window.add("a", 50.0, 0.2, None)  # the clock stepped back
    assert window.most("a", 0.0) == (50.0, 0.2, None)


def _row(t: float, usage: float | None, running: float = 4.0) -> Snapshot:
    e = EngineStats(
        url="u", up=True, kv_cache_usage_frac=usage, running=running, kv_capacity_tokens=1000
    )
    return Snapshot(time=t, engines=(e,))


def test_kv_peak_reads_the_window_and_at_least_the_poll_before() -> None:
    """Preemption frees blocks, so the peak, not this poll's figure; with polls further apart
    than the window, the previous poll still counts (the window's start)."""
    settings = HealthSettings(window_s=10.0)
    now = EngineStats(url="u", up=True, kv_cache_usage_frac=0.5)
    close = [_row(0.0, 0.99), _row(5.0, 0.97), _row(9.0, 0.6)]
    ctx = Context(time=10.0, engines=(now,), gateway=None, gpus=(), settings=settings)
    kept = KvMaxima(settings.window_s)
    for snap in close:
        kept.keep(snap)
    assert kv_peak(Context(**{**vars(ctx), "kv_maxima": kept}), now) == 0.99
    assert kv_peak(Context(**{**vars(ctx), "history": close}), now) == 0.99  # made from it
    far = [_row(0.0, 0.99), _row(30.0, 0.8)]
    ctx_far = Context(**{**vars(ctx), "time": 60.0, "history": far})
    assert kv_peak(ctx_far, now) == 0.8  # the poll before, not the one a minute back


def test_kv_size_holds_the_most_held_of_the_last_minute() -> None:
    """A long prompt's poll 30 s ago held 900 tokens a sequence: that sizes a slot, not the
    short chats running now; past a minute it no longer does."""
    kept = KvMaxima(10.0)
    kept.keep(_row(30.0, 0.9, running=1.0))  # 900 tokens held by one sequence
    kept.keep(_row(50.0, 0.2, running=4.0))  # 50 each
    held = kept.held.most("u", 60.0 - 60.0)
    assert held == (30.0, 900.0, (0.9, 1.0))
    assert kept.held.most("u", 95.0 - 60.0) == (50.0, 50.0, (0.2, 4.0))
