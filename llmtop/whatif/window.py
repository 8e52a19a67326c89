"""A window of scrapes (vLLM /metrics, and the gateway's /admin/stats when there is one) ->
what the engine did over it: rates, means, quantiles, per-interval step figures. Pure.

Counters are differenced between the first and last scrape (a counter that went down means the
engine restarted: the window is then refused, not silently wrong). The per-interval figures
(mean ITL against KV tokens in use, prompt tokens per step) are what the step-time fit reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from llmtop.core.base.raw import Sample
from llmtop.core.derive.series import histogram_quantile
from llmtop.core.vllm import engines, names
from llmtop.core.vllm.scrape import EngineScrape, Histogram
from llmtop.errors import UsageError
from llmtop.whatif.lengths import LengthDist, from_histogram

STEPS = "vllm:iteration_tokens_total"
"""Tokens per engine step (a histogram): its count is the number of steps."""


def sample_names() -> frozenset[str]:
    """Every sample name the what-if reads: llmtop's usual set plus the buckets it needs."""
    extra = {STEPS + s for s in ("_bucket", "_sum", "_count")}
    for key in ("prompt_len", "generation_len"):
        for fam in names.HISTOGRAMS[key]:
            extra.add(fam + "_bucket")
    return names.sample_names() | extra


@dataclass(frozen=True)
class Point:
    """One scrape: when (seconds, any monotonic clock), the engine's values, the gateway's."""

    t: float
    engine: EngineScrape
    steps: float | None
    """Cumulative engine steps (iteration_tokens count); None when not exported."""
    step_buckets: tuple[tuple[float, float], ...] = ()
    gateway: dict[str, Any] | None = None


def point(t: float, samples: tuple[Sample, ...], gateway: dict[str, Any] | None) -> Point:
    """A `Point` from one scrape's parsed samples."""
    steps = [s for s in samples if s.name == STEPS + "_count"]
    buckets: dict[float, float] = {}
    for s in samples:
        if s.name == STEPS + "_bucket":
            le = dict(s.labels).get("le", "+Inf")
            key = math.inf if le in ("+Inf", "Inf") else float(le)
            buckets[key] = buckets.get(key, 0.0) + s.value
    return Point(
        t,
        engines.extract(samples),
        sum(s.value for s in steps) if steps else None,
        tuple(sorted(buckets.items())),
        gateway,
    )


@dataclass(frozen=True)
class Interval:
    """Between two consecutive scrapes: what the step-time fit reads."""

    dt_s: float
    itl_mean_s: float | None
    itl_count: float
    kv_tokens: float
    """KV tokens in use (mean of the two scrapes' usage x capacity)."""
    running: float
    steps: float | None
    prompt_tokens: float
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
    finished_per_s: float
    arrival_per_s: float
    arrival_source: str
    arrivals: float
    """Requests counted arriving in the window: the rate's Poisson error is rate / sqrt(this)."""
    running_mean: float
    waiting_mean: float
    preemptions_per_s: float
    ttft_mean_s: float | None
    ttft_p50_s: float | None
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
    max_model_len_hint: int | None
    intervals: tuple[Interval, ...]
    gateway_limits: dict[str, Any] | None = None
    gateway_ttft_p95_s: float | None = None
    gateway_queue_wait_p95_s: float | None = None
    gateway_rejected_per_s: float | None = None
    gateway_queued: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def arrival_error_per_s(self) -> float | None:
        """One standard error of the arrival rate, counting arrivals as a Poisson process."""
        return self.arrival_per_s / self.arrivals**0.5 if self.arrivals > 0 else None


def _delta(a: EngineScrape, b: EngineScrape, key: str) -> float:
    d = b.counters.get(key, 0.0) - a.counters.get(key, 0.0)
    if d < 0:
        raise UsageError(f"the engine's {key} counter went down in the window (restarted?)")
    return d


def _finished(s: EngineScrape) -> float:
    return sum(v for k, v in s.counters.items() if k.startswith("finished:"))


def _hist_delta(a: EngineScrape, b: EngineScrape, key: str) -> Histogram | None:
    hb = b.histograms.get(key)
    if hb is None:
        return None
    ha = a.histograms.get(key)
    before = dict(ha.buckets) if ha is not None else {}
    buckets = tuple((le, max(0.0, c - before.get(le, 0.0))) for le, c in hb.buckets)
    if ha is None:
        return hb
    return Histogram(buckets, hb.sum - ha.sum, hb.count - ha.count)


def _mean(h: Histogram | None) -> float | None:
    return h.sum / h.count if h is not None and h.count > 0 else None


def _gauge(p: Point, key: str) -> float:
    v = p.engine.gauges.get(key)
    return 0.0 if v is None else v


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

    running = [_gauge(p, "running") for p in points]
    waiting = [_gauge(p, "waiting") for p in points]
    arrivals, source = _arrivals(points, finished, span)

    step_hist = _step_buckets_delta(first, last)
    max_step = None
    prev = 0.0
    for le, c in step_hist:
        if c > prev and math.isfinite(le):
            max_step = le
        prev = max(prev, c)
    prompt_hist = b.histograms.get("prompt_len")
    hint = None
    if prompt_hist is not None:
        finite = [le for le, _ in prompt_hist.buckets if math.isfinite(le)]
        hint = int(max(finite)) if finite else None

    gw = last.gateway
    gw_rejected = None
    if first.gateway is not None and gw is not None:
        ra = first.gateway.get("outcomes", {})
        rb = gw.get("outcomes", {})
        gone = sum(rb.get(k, 0) - ra.get(k, 0) for k in ("rejected", "timed_out"))
        gw_rejected = gone / span
    return Observed(
        span_s=span,
        scrapes=len(points),
        kv_capacity_tokens=b.kv_capacity_tokens,
        block_size=b.kv_block_size,
        generation_tok_per_s=gen / span,
        prompt_tok_per_s=prompt / span,
        finished_per_s=finished / span,
        arrival_per_s=arrivals,
        arrival_source=source,
        arrivals=arrivals * span,
        running_mean=sum(running) / len(running),
        waiting_mean=sum(waiting) / len(waiting),
        preemptions_per_s=_delta(a, b, "preemptions") / span,
        ttft_mean_s=_mean(ttft),
        ttft_p50_s=histogram_quantile(0.5, ttft.buckets) if ttft else None,
        ttft_p95_s=histogram_quantile(0.95, ttft.buckets) if ttft else None,
        ttft_buckets=tuple(le for le, _ in ttft.buckets) if ttft else (),
        itl_mean_s=_mean(itl),
        prefill_mean_s=_mean(_hist_delta(a, b, "prefill_time")),
        queue_time_mean_s=_mean(_hist_delta(a, b, "queue_time")),
        prompt_len=prompt_len,
        output_len=output_len,
        lengths_from=lengths_from,
        max_step_tokens=max_step,
        max_model_len_hint=hint,
        intervals=tuple(_interval(p, q) for p, q in pairwise(points)),
        gateway_limits=gw.get("limits") if gw is not None else None,
        gateway_ttft_p95_s=_nested(gw, "ttft_s", "p95"),
        gateway_queue_wait_p95_s=_nested(gw, "queue_wait_s", "p95"),
        gateway_rejected_per_s=gw_rejected,
        gateway_queued=(
            sum(float(p.gateway.get("queued", 0)) for p in points if p.gateway) / len(points)
            if gw is not None
            else None
        ),
        notes=notes,
    )


def _arrivals(points: Sequence[Point], finished: float, span: float) -> tuple[float, str]:
    """Offered at the gateway when it answered at both ends, else finished + Δ(in the engine)."""
    ga, gb = points[0].gateway, points[-1].gateway
    if ga is not None and gb is not None and "offered" in ga and "offered" in gb:
        return (float(gb["offered"]) - float(ga["offered"])) / span, "gateway offered"
    a, b = points[0], points[-1]
    held = (_gauge(b, "running") + _gauge(b, "waiting")) - (
        _gauge(a, "running") + _gauge(a, "waiting")
    )
    return max(0.0, finished + held) / span, "engine finished + change in running and waiting"


def _nested(d: dict[str, Any] | None, key: str, sub: str) -> float | None:
    if d is None or not isinstance(d.get(key), dict):
        return None
    v = d[key].get(sub)
    return float(v) if isinstance(v, int | float) else None


def _step_buckets_delta(a: Point, b: Point) -> tuple[tuple[float, float], ...]:
    before = dict(a.step_buckets)
    return tuple((le, c - before.get(le, 0.0)) for le, c in b.step_buckets)


def _interval(p: Point, q: Point) -> Interval:
    a, b = p.engine, q.engine
    itl = _hist_delta(a, b, "itl")
    prefill = _hist_delta(a, b, "prefill_time")
    cap = b.kv_capacity_tokens or 0
    kv = 0.5 * ((a.gauges.get("kv_usage") or 0.0) + (b.gauges.get("kv_usage") or 0.0)) * cap
    steps = q.steps - p.steps if q.steps is not None and p.steps is not None else None
    return Interval(
        dt_s=q.t - p.t,
        itl_mean_s=_mean(itl),
        itl_count=itl.count if itl is not None else 0.0,
        kv_tokens=kv,
        running=0.5 * (_gauge(p, "running") + _gauge(q, "running")),
        steps=steps,
        prompt_tokens=max(
            0.0, b.counters.get("prompt_tokens", 0.0) - a.counters.get("prompt_tokens", 0.0)
        ),
        prefill_mean_s=_mean(prefill),
        prefills=prefill.count if prefill is not None else 0.0,
    )
