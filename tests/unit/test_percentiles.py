"""The two sample percentiles (core/derive/percentiles.py): linear between ranks, and the
nearest rank (a value seen), plain or weighted."""

from __future__ import annotations

import itertools
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.derive.percentiles import percentile_linear, percentile_nearest_rank

_SAMPLES = st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200)


def test_linear_interpolates_between_ranks() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile_linear(xs, 0) == 1.0
    assert percentile_linear(xs, 100) == 4.0
    assert percentile_linear(xs, 50) == pytest.approx(2.5)
    assert percentile_linear([7.0], 95) == 7.0
    assert percentile_linear([], 50) is None


@given(_SAMPLES)
def test_linear_is_monotonic_and_bounded(xs: list[float]) -> None:
    ps = [percentile_linear(xs, q) for q in (0, 25, 50, 90, 99, 100)]
    assert ps[0] == min(xs)
    assert ps[-1] == max(xs)
    assert all(a is not None and b is not None and a <= b for a, b in itertools.pairwise(ps))
    assert percentile_linear(xs, 50) == pytest.approx(statistics.median(xs))


def test_nearest_rank_is_a_value_seen() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile_nearest_rank(xs, 50) == 2.0  # 2 of 4 at or below it
    assert percentile_nearest_rank(xs, 51) == 3.0
    assert percentile_nearest_rank(xs, 95) == 4.0
    assert percentile_nearest_rank(xs, 0) == 1.0
    assert percentile_nearest_rank([], 50) is None


@given(_SAMPLES, st.floats(0, 100))
def test_nearest_rank_holds_its_share(xs: list[float], pct: float) -> None:
    """At least `pct` % of the samples at or below the answer, fewer strictly below it."""
    got = percentile_nearest_rank(xs, pct)
    assert got in xs
    assert sum(x <= got for x in xs) >= pct / 100 * len(xs) * (1 - 1e-12)
    assert sum(x < got for x in xs) < max(1.0, pct / 100 * len(xs))


@given(_SAMPLES, st.sampled_from([10, 50, 90, 95, 99]))
def test_nearest_rank_with_unit_weights_is_the_plain_one(xs: list[float], pct: int) -> None:
    assert percentile_nearest_rank(xs, pct, [1] * len(xs)) == percentile_nearest_rank(xs, pct)


def test_weights_count_each_value_as_often() -> None:
    """A step of 30 tokens weighs as 30 steps of one: ITL over tokens, not steps."""
    steps, tokens = [0.01, 0.2], [30, 1]
    assert percentile_nearest_rank(steps, 95, tokens) == 0.01
    assert percentile_nearest_rank(steps, 99, tokens) == 0.2
    assert percentile_nearest_rank(steps, 95, [0, 0]) is None
