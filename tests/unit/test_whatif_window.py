"""The what-if's window reads vLLM through core's reader: an unexported figure is an error or
left out of the fit, never a zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.core.exposition import promtext
from llmtop.errors import UsageError
from llmtop.whatif.model.window import Point, observe, point, sample_names

KEEP = promtext.keep_names(sample_names())
TEXT = (Path(__file__).parents[1] / "fixtures" / "sim-metrics-load.txt").read_text()


def _points(drop: str | None = None) -> list[Point]:
    text = TEXT if drop is None else "".join(ln for ln in TEXT.splitlines(True) if drop not in ln)
    samples = promtext.parse(text, KEEP)
    return [point(t, samples, None) for t in (0.0, 5.0, 10.0)]


def test_a_window_of_the_sims_scrapes_reads_its_steps_and_kv_use() -> None:
    obs = observe(_points())
    assert obs.scrapes == 3
    assert all(iv.kv_tokens is not None for iv in obs.intervals)
    assert all(iv.steps == 0.0 for iv in obs.intervals)  # the same text: no step in between


def test_no_running_gauge_is_an_error_not_an_idle_engine() -> None:
    with pytest.raises(UsageError, match="running gauge"):
        observe(_points(drop="vllm:num_requests_running{"))


def test_no_kv_use_leaves_the_intervals_kv_unknown() -> None:
    obs = observe(_points(drop="vllm:kv_cache_usage_perc{"))
    assert [iv.kv_tokens for iv in obs.intervals] == [None, None]
