"""A ground truth in virtual time: a known sim profile behind the gateway's admission code, driven
by Poisson traffic and scraped once a virtual second exactly as /metrics and /admin/stats would
be. Tests and bench/bench_whatif.py calibrate from these scrapes alone and compare the
prediction with what the known engine then does; `predict_spans` runs a schedule of caps as one
traffic draw and `spread` says what one measurement may show. Pure (no sockets, no wall clock).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

from llmtop.core.base.slo import SloSettings
from llmtop.core.derive.percentiles import percentile_linear
from llmtop.core.exposition import promtext
from llmtop.gateway.admission.controller import AdmissionController
from llmtop.gateway.admission.limits import Limits
from llmtop.sim.metrics import MetricsRenderer
from llmtop.sim.model import Engine
from llmtop.sim.profiles import Profile
from llmtop.whatif.model.calibrate import Calibration, StepFit
from llmtop.whatif.model.lengths import LengthDist
from llmtop.whatif.model.predict import Candidate, Prediction, predict, summarise
from llmtop.whatif.model.scenario import Change, Span, State
from llmtop.whatif.model.simulate import Observer, WhatIfRun, simulate
from llmtop.whatif.model.window import Point, point, sample_names

_KEEP = promtext.keep_names(sample_names())


@dataclass(frozen=True)
class Truth:
    """The known engine and traffic (what the predictor must not be told)."""

    profile: Profile
    kv_tokens: int | None
    arrival_per_s: float
    prompt_len: LengthDist
    output_len: LengthDist
    limits: Limits

    def calibration(self, limits: Limits | None = None) -> Calibration:
        """The exact inputs: running `predict` on these is the ground truth."""
        p = self.profile
        kv = self.kv_tokens if self.kv_tokens is not None else p.derived_kv_tokens()
        kv -= kv % p.block_size
        return Calibration(
            profile=p,
            kv_tokens=kv,
            max_num_seqs=p.max_num_seqs,
            max_num_batched_tokens=p.max_num_batched_tokens,
            max_model_len=min(p.max_model_len, kv),
            arrival_per_s=self.arrival_per_s,
            prompt_len=self.prompt_len,
            output_len=self.output_len,
            limits=limits or self.limits,
            fit=StepFit(0.0, 0.0, 0.0, 0.0, "truth", "truth"),
        )


def scrape_run(truth: Truth, window_s: float, seed: int = 100) -> list[Point]:
    """Run the truth at its current limits for `window_s` virtual seconds (after a warm-up of
    the same length); the scrapes of the second half, one a virtual second."""
    points: list[Point] = []
    renderer: list[MetricsRenderer] = []

    def observe(t: float, engine: Engine, ctl: AdmissionController | None) -> None:
        if not renderer:
            renderer.append(MetricsRenderer(engine, "truth", 0.0))
        if t < window_s:
            return
        samples = promtext.parse(renderer[0].render(), _KEEP)
        points.append(point(t, samples, ctl.stats() if ctl is not None else None))

    predict(
        truth.calibration(),
        Candidate("scrape", truth.limits),
        horizon_s=window_s,
        warmup_s=window_s,
        seed=seed,
        expected_count=False,
        observer=observe,
    )
    return points


def measure(truth: Truth, cap: int, horizon_s: float, warmup_s: float, seed: int) -> Prediction:
    """What the known engine does at `cap` (the figure a prediction is judged against)."""
    limits = replace(truth.limits, max_concurrency=cap)
    return predict(
        truth.calibration(limits),
        Candidate(f"cap {cap}", limits),
        horizon_s=horizon_s,
        warmup_s=warmup_s,
        seed=seed,
        expected_count=False,
    )


@dataclass(frozen=True)
class CapRun:
    """One cap of a schedule: the scrape right before it was applied, and what then happened."""

    cap: int
    before: Point
    """The last scrape before the change (at most a virtual second before it)."""
    measured: Prediction
    """The known engine over the measured span (one traffic draw: a measurement)."""


def schedule_run(
    truth: Truth,
    caps: tuple[int, ...],
    *,
    warmup_s: float,
    window_s: float,
    settle_s: float,
    measure_s: float,
    tail_s: float,
    seed: int,
) -> tuple[list[Point], list[CapRun]]:
    """What `whatif_verify` does over sockets, in virtual time: the truth at its limits
    for `warmup_s`, scraped once a second over `window_s`, then each cap in turn: applied,
    `settle_s` later measured over `measure_s`, then held `tail_s` more before the next.
    Returns the window's scrapes and, per cap, the scrape before its change and the figures."""
    step = settle_s + measure_s + tail_s
    first = warmup_s + window_s
    at = [first + k * step for k in range(len(caps))]
    points: list[Point] = []
    before: dict[int, Point] = {}
    renderer: list[MetricsRenderer] = []

    def observe(t: float, engine: Engine, ctl: AdmissionController | None) -> None:
        if not renderer:
            renderer.append(MetricsRenderer(engine, "truth", 0.0))
        due = [k for k, c in enumerate(at) if c - 1.0 <= t < c]
        if not (warmup_s <= t <= first) and not due:
            return
        samples = promtext.parse(renderer[0].render(), _KEEP)
        p = point(t, samples, ctl.stats() if ctl is not None else None)
        if warmup_s <= t <= first:
            points.append(p)
        for k in due:
            before[k] = p

    limits = [replace(truth.limits, max_concurrency=cap) for cap in caps]
    spans = [
        (Candidate(f"cap {cap}", lim), Span(c + settle_s, c + settle_s + measure_s))
        for cap, lim, c in zip(caps, limits, at, strict=True)
    ]
    measured = predict_spans(
        truth.calibration(),
        truth.limits,
        spans,
        arrivals_until_s=first + len(caps) * step,
        changes=[Change(c, lim) for c, lim in zip(at, limits, strict=True)],
        seed=seed,
        observer=observe,
    )
    pairs = enumerate(zip(caps, measured, strict=True))
    return points, [CapRun(cap, before[k], m) for k, (cap, m) in pairs]


def predict_spans(
    cal: Calibration,
    limits: Limits | None,
    spans: Sequence[tuple[Candidate, Span]],
    *,
    arrivals_until_s: float,
    changes: Sequence[Change] = (),
    seed: int = 0,
    ttft_slo_s: float = SloSettings.ttft_s,
    itl_slo_s: float = SloSettings.itl_s,
    expected_count: bool = False,
    observer: Observer | None = None,
) -> list[Prediction]:
    """One run with limit changes at given times and a figure per measured span: the ground
    truth of a schedule (start at one cap, then apply others in turn), as one traffic draw."""
    loop = asyncio.new_event_loop()
    try:
        runs = loop.run_until_complete(
            simulate(
                partial(
                    WhatIfRun,
                    cal,
                    limits,
                    spans=[s for _, s in spans],
                    arrivals_until_s=arrivals_until_s,
                    seed=seed,
                    changes=changes,
                    expected_count=expected_count,
                ),
                observer,
            )
        )
    finally:
        loop.close()
    return [
        summarise(cand, [run], ttft_slo_s, itl_slo_s)
        for (cand, _), run in zip(spans, runs, strict=True)
    ]


@dataclass(frozen=True)
class Spread:
    """What one measurement over the horizon may show: the 10th and 90th percentiles over
    traffic draws, each with its own Poisson arrivals and its rate drawn from the estimate's
    standard error. Near a cliff one 40 s span's TTFT p95 moves by several times: a measurement
    is judged against this, not only against the expected figure."""

    ttft_p95_s: tuple[float, float] | None
    tok_per_s: tuple[float, float]
    draws: int

    def holds_ttft(self, measured: float | None) -> bool | None:
        """The measured TTFT p95 lies within the 10-90 % range (None: nothing to compare)."""
        if measured is None or self.ttft_p95_s is None:
            return None
        return self.ttft_p95_s[0] <= measured <= self.ttft_p95_s[1]


def spread(
    cal: Calibration,
    candidate: Candidate,
    *,
    rate_error_per_s: float,
    horizon_s: float,
    warmup_s: float,
    start: State | None = None,
    draws: int = 10,
    seed: int = 0,
) -> Spread:
    """`draws` single runs of the candidate, as a measurement would see them (module docstring
    of `Spread`); deterministic for a seed."""
    rng = random.Random(seed + 7919)
    rate = cal.arrival_per_s
    ttfts: list[float] = []
    toks: list[float] = []
    for k in range(max(2, draws)):
        drawn = max(0.05 * rate, rng.gauss(rate, rate_error_per_s))
        p = predict(
            replace(cal, arrival_per_s=drawn),
            candidate,
            horizon_s=horizon_s,
            warmup_s=warmup_s,
            seed=seed + 100 + k,
            start=start,
            expected_count=False,
        )
        toks.append(p.output_tok_per_s)
        if p.ttft_client_p95_s is not None:
            ttfts.append(p.ttft_client_p95_s)

    def band(xs: list[float]) -> tuple[float, float]:
        lo, hi = percentile_linear(xs, 10), percentile_linear(xs, 90)
        assert lo is not None
        assert hi is not None
        return lo, hi

    return Spread(band(ttfts) if ttfts else None, band(toks), len(toks))
