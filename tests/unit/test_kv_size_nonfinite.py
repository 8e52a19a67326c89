"""KV sizing with figures that are not finite (a NaN gauge; a Prometheus answer of 1e309 read as
infinity): no exception, and what is finite still sizes. Both used to raise out of the rules."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.findings.catalog import HealthState
from llmtop.core.health.kvsize import kv_size
from llmtop.core.health.rulebase import Context
from llmtop.settings import HealthSettings

NAN, INF = math.nan, math.inf


def engine(**figures: float | None) -> EngineStats:
    base: dict[str, float | None] = {
        "running": 8.0,
        "waiting": 4.0,
        "kv_cache_usage_frac": 0.97,
        "mean_prompt_tokens": 900.0,
        "mean_generation_tokens": 100.0,
    }
    base.update(figures)
    return EngineStats(
        url="http://r1",
        up=True,
        kv_capacity_tokens=38_800,
        kv_block_size=16,
        **base,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "figures",
    [
        {"kv_cache_usage_frac": NAN},
        {"kv_cache_usage_frac": INF},
        {"mean_prompt_tokens": INF},
        {"mean_generation_tokens": INF},
        {"running": INF},
        {"mean_prompt_tokens": NAN, "kv_cache_usage_frac": NAN},
    ],
)
def test_non_finite_figures_size_from_what_is_finite(figures: dict[str, float]) -> None:
    e = engine(**figures)
    before = Snapshot(time=0.0, engines=(engine(),))
    size = kv_size(e, [before], now=5.0)
    if size is not None:
        assert math.isfinite(size.per_request_tokens)
        assert size.fits >= 1
        size.basis(), size.arithmetic()  # the text a finding prints
    settings = HealthSettings(fire_after_s=0.0, clear_after_s=0.0)
    rules = HealthState(settings)
    ctx = Context(time=5.0, engines=(e,), gateway=None, gpus=(), settings=settings)
    findings = rules.evaluate(replace(ctx, history=[before]))  # the KV rules size it, no raise
    if e.kv_cache_usage_frac == 0.97:  # the cache still full and finite: it is still judged so
        assert any(f.id == "kv-exhausted" for f in findings)
    assert all(math.isfinite(float(n)) for f in findings for n in _numbers(f.summary))


def test_an_infinite_capacity_is_no_capacity() -> None:
    e = engine()
    e = EngineStats(**{**e.__dict__, "kv_capacity_tokens": INF})
    assert kv_size(e) is None


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d[\d,]*\.?\d*", text.replace(",", ""))
