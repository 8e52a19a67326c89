"""A window of scrapes (/metrics, /admin/stats) -> what the engine did over it. Pure.

Rates, means, quantiles (core's vLLM reader) and the per-interval figures the step-time fit reads.
A counter that went down (a restart) refuses the window; one not exported is an error, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from llmtop.core.base.raw import Sample
from llmtop.core.derive.derive import NO_GAUGES
from llmtop.core.derive.histogram import histogram_quantile
from llmtop.core.derive.signals import histogram_increase, mean
from llmtop.core.vllm import names, reader
from llmtop.core.vllm.names import ITERATION_TOKENS
from llmtop.core.vllm.scrape import EngineScrape, Histogram
from llmtop.errors import UsageError
from llmtop.whatif.model.lengths import LengthDist, from_histogram


def sample_names() -> frozenset[str]:
    """Every sample name the what-if reads: llmtop's usual set plus the buckets it needs."""
    steps = {ITERATION_TOKENS + s for s in ("_bucket", "_sum", "_count")}
    return names.sample_names(bucketed=("prompt_len", "generation_len")) | steps


@dataclass(frozen=True)
class Point:
    """One scrape: when (seconds, any monotonic clock), the engine's values, the gateway's."""

    t: float
    engine: EngineScrape
    steps: Histogram | None
    """Tokens per engine step, cumulative (`names.ITERATION_TOKENS`: its count is the number
    of steps); None when not exported."""
    gateway: dict[str, Any] | None = None


def point(t: float, samples: tuple[Sample, ...], gateway: dict[str, Any] | None) -> Point:
    """A `Point` from one scrape's parsed samples."""
    steps = reader.histogram(samples, ITERATION_TOKENS)
    return Point(t, reader.extract(samples), steps, gateway)


@dataclass(frozen=True)
class Interval:
    """Between two consecutive scrapes: what the step-time fit reads."""

    dt_s: float
    itl_mean_s: float | None
    itl_count: float
    kv_tokens: float | None
    """KV tokens in use (mean of the two scrapes' usage x capacity); None when unknown."""
    steps: float | None
    prefill_mean_s: float | None
    """Mean scheduled -> first token of the requests that got theirs in the interval."""
    prefills: float


@dataclass(frozen=True)
class Observed:
    """The window, summarised; None = not exported or nothing happened."""

    span_s: float
    scrapes: int
    kv_capacity_tokens: int
    block_size: int
    generation_tok_per_s: float
    prompt_tok_per_s: float
    arrival_per_s: float
    arrival_source: str
    arrivals: float
    """Requests counted arriving in the window: the rate's Poisson error is rate / sqrt(this)."""
    running_mean: float
    preemptions_per_s: float
    ttft_mean_s: float | None
    ttft_p95_s: float | None
    ttft_buckets: tuple[float, ...]
    itl_mean_s: float | None
    prefill_mean_s: float | None
    queue_time_mean_s: float | None
    prompt_len: LengthDist | None
    output_len: LengthDist | None
    lengths_from: str
    """"window" or "since start" (too few requests finished in the window)."""
    max_step_tokens: float | None
    """Upper bound of the highest iteration_tokens bucket used in the window."""
    intervals: tuple[Interval, ...]
    gateway_limits: dict[str, Any] | None = None
    gateway_ttft_p95_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def arrival_error_per_s(self) -> float | None:
        """One standard error of the arrival rate, counting arrivals as a Poisson process."""
        return self.arrival_per_s / self.arrivals**0.5 if self.arrivals > 0 else None


def _delta(a: EngineScrape, b: EngineScrape, key: str) -> float:
    first, last = a.counters.get(key), b.counters.get(key)
    if first is None or last is None:
        raise UsageError(f"the engine does not export its {key} counter")
    if last < first:
        raise UsageError(f"the engine's {key} counter went down in the window (restarted?)")
    return last - first


def _finished(s: EngineScrape) -> float:
    return sum(v for k, v in s.counters.items() if k.startswith("finished:"))


def _hist_delta(a: EngineScrape, b: EngineScrape, key: str) -> Histogram | None:
    return histogram_increase(b.histograms.get(key), a.histograms.get(key))


def _gauge(p: Point, key: str) -> float | None:
    return p.engine.gauges.get(key)


def _gauge_mean(points: Sequence[Point], key: str) -> float:
    """The gauge's mean over the scrapes that have it (UsageError when none has)."""
    known = [v for p in points if (v := _gauge(p, key)) is not None]
    if not known:
        raise UsageError(f"the engine exports no {key} gauge ({NO_GAUGES})")
    return sum(known) / len(known)


def _lengths(
    first: EngineScrape, last: EngineScrape, key: str, min_count: float
) -> tuple[LengthDist | None, bool]:
    h = _hist_delta(first, last, key)
    if h is not None and h.count >= min_count:
        return from_histogram(h.buckets, h.sum, h.count), True
    whole = last.histograms.get(key)
    if whole is None:
        return None, False
    return from_histogram(whole.buckets, whole.sum, whole.count), False


def observe(points: Sequence[Point], min_finished: float = 10.0) -> Observed:
    """Summarise a window of at least two scrapes; UsageError when it cannot be read."""
    if len(points) < 2:
        raise UsageError("the what-if needs at least two scrapes of the engine")
    first, last = points[0], points[-1]
    a, b = first.engine, last.engine
    span = last.t - first.t
    if span <= 0:
        raise UsageError("the scrapes of the window are not in time order")
    if not b.has_vllm:
        raise UsageError("the target exports no vllm:* series (not vLLM, or --disable-log-stats)")
    if b.kv_capacity_tokens is None or b.kv_block_size is None:
        raise UsageError("the engine exports no vllm:cache_config_info: KV capacity unknown")
    notes: list[str] = []
    gen = _delta(a, b, "generation_tokens")
    prompt = _delta(a, b, "prompt_tokens")
    finished = _finished(b) - _finished(a)
    ttft = _hist_delta(a, b, "ttft")
    itl = _hist_delta(a, b, "itl")
    prompt_len, in_window = _lengths(a, b, "prompt_len", min_finished)
    output_len, _ = _lengths(a, b, "generation_len", min_finished)
    lengths_from = "window" if in_window else "since start"
    if not in_window:
        notes.append(
            f"under {min_finished:.0f} requests finished in the window: lengths since start"
        )

    running = _gauge_mean(points, "running")
    arrivals, source = _arrivals(points, finished, span)

    step_hist = histogram_increase(last.steps, first.steps)
    max_step = None
    prev = 0.0
    for le, c in step_hist.buckets if step_hist is not None else ():
        if c > prev and math.isfinite(le):
            max_step = le
        prev = max(prev, c)

    gw = last.gateway
    return Observed(
        span_s=span,
        scrapes=len(points),
        kv_capacity_tokens=b.kv_capacity_tokens,
        block_size=b.kv_block_size,
        generation_tok_per_s=gen / span,
        prompt_tok_per_s=prompt / span,
        arrival_per_s=arrivals,
        arrival_source=source,
        arrivals=arrivals * span,
        running_mean=running,
        preemptions_per_s=_delta(a, b, "preemptions") / span,
        ttft_mean_s=mean(ttft),
        ttft_p95_s=histogram_quantile(0.95, ttft.buckets) if ttft else None,
        ttft_buckets=tuple(le for le, _ in ttft.buckets) if ttft else (),
        itl_mean_s=mean(itl),
        prefill_mean_s=mean(_hist_delta(a, b, "prefill_time")),
        queue_time_mean_s=mean(_hist_delta(a, b, "queue_time")),
        prompt_len=prompt_len,
        output_len=output_len,
        lengths_from=lengths_from,
        max_step_tokens=max_step,
        intervals=tuple(_interval(p, q) for p, q in pairwise(points)),
        gateway_limits=gw.get("limits") if gw is not None else None,
        gateway_ttft_p95_s=_nested(gw, "ttft_s", "p95"),
        notes=notes,
    )


def _arrivals(points: Sequence[Point], finished: float, span: float) -> tuple[float, str]:
    """Offered at the gateway when it answered at both ends, else finished + Δ(in the engine)."""
    ga, gb = points[0].gateway, points[-1].gateway
    if ga is not None and gb is not None and "offered" in ga and "offered" in gb:
        return (float(gb["offered"]) - float(ga["offered"])) / span, "gateway offered"
    ends = [_gauge(p, key) for p in (points[0], points[-1]) for key in ("running", "waiting")]
    if any(v is None for v in ends):
        return max(0.0, finished) / span, "engine finished (running and waiting not exported)"
    ra, wa, rb, wb = (v or 0.0 for v in ends)
    held = (rb + wb) - (ra + wa)
    return max(0.0, finished + held) / span, "engine finished + change in running and waiting"


def _nested(d: dict[str, Any] | None, key: str, sub: str) -> float | None:
    if d is None or not isinstance(d.get(key), dict):
        return None
    v = d[key].get(sub)
    return float(v) if isinstance(v, int | float) else None


def _interval(p: Point, q: Point) -> Interval:
    a, b = p.engine, q.engine
    itl = _hist_delta(a, b, "itl")
    prefill = _hist_delta(a, b, "prefill_time")
    cap = b.kv_capacity_tokens
    ua, ub = a.gauges.get("kv_usage"), b.gauges.get("kv_usage")
    kv = None if ua is None or ub is None or cap is None else 0.5 * (ua + ub) * cap
    step_hist = histogram_increase(q.steps, p.steps) if p.steps is not None else None
    steps = step_hist.count if step_hist is not None else None
    return Interval(
        dt_s=q.t - p.t,
        itl_mean_s=mean(itl),
        itl_count=itl.count if itl is not None else 0.0,
        kv_tokens=kv,
        steps=steps,
        prefill_mean_s=mean(prefill),
        prefills=prefill.count if prefill is not None else 0.0,
    )
