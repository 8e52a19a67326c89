"""The features' look-back (`_earlier`) bisects a history the pipeline vouches rises
(`RisingHistory`) instead of scanning it: what it yields must be what a scan of every kept
snapshot yields, a restart inside the look-back or not; a clock stepped back is scanned whole,
and the pipeline stops vouching while such a step is kept."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.findings import features
from llmtop.core.findings.history import RisingHistory
from llmtop.core.health.rulebase import Context
from llmtop.core.health.thresholds import HealthSettings
from llmtop.core.pipeline.pipeline import HISTORY_S, Pipeline

URL = "http://e:8000"


def _scan(
    ctx: Context, e: EngineStats, value: Callable[[EngineStats], float | None]
) -> Iterator[tuple[float, float]]:
    """The look-back as it was: every kept snapshot tested."""
    s = ctx.settings
    since = ctx.time - s.prefix_lookback_s
    if e.restarted_at is not None:
        since = max(since, e.restarted_at)
    for snap in ctx.history:
        if snap.time < since or ctx.time - snap.time < s.window_s:
            continue
        for row in snap.engines:
            if row.url == e.url and row.up:
                v = value(row)
                if v is not None:
                    yield ctx.time - snap.time, v


def _hit(e: EngineStats) -> float | None:
    return e.prefix_cache_hit_frac


def _history(rng: random.Random, n: int, step_back: bool) -> tuple[Snapshot, ...]:
    """`n` snapshots at uneven steps, marked rising unless the clock steps back halfway."""
    t, out = 1000.0, []
    for i in range(n):
        t += rng.choice((0.25, 0.5, 1.0, 1.0, 1.0, 2.5))
        if step_back and i == n // 2:
            t -= rng.choice((5.0, 30.0, 400.0))
        rows = (
            EngineStats(url=URL, up=rng.random() > 0.1, prefix_cache_hit_frac=rng.random()),
            EngineStats(url="http://other:8000", up=True, prefix_cache_hit_frac=0.5),
        )
        out.append(Snapshot(time=t, engines=rows))
    return tuple(out) if step_back else RisingHistory(out)


@pytest.mark.parametrize("step_back", [False, True])
def test_the_bisected_look_back_yields_what_a_scan_does(step_back: bool) -> None:
    rng = random.Random(7)
    settings = HealthSettings()
    for _ in range(60):
        history = _history(rng, rng.randint(0, 700), step_back)
        now = (history[-1].time if history else 1000.0) + rng.choice((0.0, 0.5, 1.0, 10.0))
        restarted = rng.choice((None, now - 30.0, now - 5.0, now - 500.0))
        e = EngineStats(url=URL, up=True, restarted_at=restarted)
        ctx = Context(time=now, engines=(e,), gateway=None, gpus=(), settings=settings,
                      history=history)  # fmt: skip
        want = list(_scan(ctx, e, _hit))
        assert list(features._earlier(ctx, e, _hit)) == want


def test_an_exact_window_edge_is_left_out_as_before() -> None:
    settings = HealthSettings()
    times = [100.0 + 0.1 * i for i in range(700)]  # tenths: float edges
    history = RisingHistory(
        Snapshot(time=t, engines=(EngineStats(url=URL, up=True, prefix_cache_hit_frac=t),))
        for t in times
    )
    e = EngineStats(url=URL, up=True)
    for now in (times[-1], times[-1] + 0.1, 100.0 + settings.window_s + 0.3):
        ctx = Context(time=now, engines=(e,), gateway=None, gpus=(), settings=settings,
                      history=history)  # fmt: skip
        assert list(features._earlier(ctx, e, _hit)) == list(_scan(ctx, e, _hit))


def test_the_pipeline_vouches_for_its_history_only_while_no_step_back_is_kept() -> None:
    pipeline = Pipeline(HealthSettings())
    t = 1000.0
    for _ in range(5):
        t += 1.0
        pipeline.update(RawPoll(time=t))
    assert isinstance(pipeline._history(), RisingHistory)
    pipeline.update(RawPoll(time=t - 30.0))  # the clock stepped back
    history = pipeline._history()
    assert not isinstance(history, RisingHistory)
    assert [s.time for s in history][-2:] == [t, t - 30.0]
    t -= 30.0
    for _ in range(int(HISTORY_S) + 60):  # until the snapshots before the step are let go
        if isinstance(pipeline._history(), RisingHistory):
            break
        t += 1.0
        pipeline.update(RawPoll(time=t))
    kept = [s.time for s in pipeline._history()]
    assert isinstance(pipeline._history(), RisingHistory)
    assert kept == sorted(kept)
    assert kept[0] > t - HISTORY_S - 1.0  # vouched again as soon as the step left, not later
