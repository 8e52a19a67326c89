"""A limit's predicted effect: the calibrated engine model behind the real admission controller.

Deterministic virtual time (`simulate`, seeded) on the workload arriving now, measured after a
warm-up in which queue and batch settle (or, from a live state, the change plays out).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

from llmtop.core.base.slo import SloSettings
from llmtop.core.derive.percentiles import percentile_linear, percentile_nearest_rank
from llmtop.gateway.admission.limits import Limits
from llmtop.whatif.model.calibrate import Calibration
from llmtop.whatif.model.scenario import Span, State
from llmtop.whatif.model.simulate import Observer, SpanRun, WhatIfRun, simulate

DEFAULT_MAX_QUEUE = 128
DEFAULT_QUEUE_TIMEOUT_S = 30.0
"""The gateway's defaults (GatewaySettings), for a candidate cap when no gateway was read."""


@dataclass(frozen=True)
class Options:
    """What to predict and how; the defaults are the command's."""

    caps: tuple[int, ...] = ()
    max_queue: int | None = None
    queue_timeout_s: float | None = None
    horizon_s: float = 60.0
    warmup_s: float = 0.0
    from_now: bool = True
    """Start from the state of the last scrape (the limits applied then); False: from an empty
    system, in steady state after `warmup_s`."""
    seed: int = 0
    ttft_slo_s: float = SloSettings.ttft_s
    itl_slo_s: float = SloSettings.itl_s
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    replicas: int = 4
    """Runs pooled per prediction (different traffic seeds): the expected figure, not one draw."""
    band: bool = True
    """Also predict at the arrival rate +- its standard error."""


@dataclass(frozen=True)
class Candidate:
    """One setting to predict: gateway limits, or None for no gateway (engine only)."""

    label: str
    limits: Limits | None


@dataclass(frozen=True)
class Prediction:
    """What the model says one setting does, over the horizon (a prediction, not a measurement);
    counts are pooled over the replicas, shares and quantiles are of the pooled requests."""

    candidate: Candidate
    offered: int
    completed: int
    rejected: int
    """Refused at the door (queue full) or timed out in the gateway's queue."""
    ttft_client_p50_s: float | None
    ttft_client_p95_s: float | None
    ttft_engine_p50_s: float | None
    ttft_engine_p95_s: float | None
    ttft_engine_all: tuple[float, ...]
    itl_p95_s: float | None
    tpot_mean_s: float | None
    queue_wait_p50_s: float | None
    queue_wait_p95_s: float | None
    goodput_frac: float | None
    """Share of the offered requests with client TTFT <= ttft SLO and mean ITL <= itl SLO."""
    output_tok_per_s: float
    preemptions_per_min: float


def candidates_for_caps(cal: Calibration, caps: Sequence[int]) -> list[Candidate]:
    """The current setting first, then one candidate per cap (other limits as they are now)."""
    base = cal.limits
    out = [Candidate("current" if base is not None else "current (no gateway)", base)]
    template = base or Limits(
        max_concurrency=1, max_queue=DEFAULT_MAX_QUEUE, queue_timeout_s=DEFAULT_QUEUE_TIMEOUT_S
    )
    for cap in caps:
        out.append(Candidate(f"cap {cap}", replace(template, max_concurrency=cap)))
    return out


def predict(
    cal: Calibration,
    candidate: Candidate,
    *,
    horizon_s: float = 60.0,
    warmup_s: float = 30.0,
    seed: int = 0,
    ttft_slo_s: float = SloSettings.ttft_s,
    itl_slo_s: float = SloSettings.itl_s,
    start: State | None = None,
    replicas: int = 1,
    expected_count: bool = True,
    observer: Observer | None = None,
) -> Prediction:
    """One candidate in virtual time over [warmup_s, warmup_s + horizon_s), on a private event loop
    (any thread). `start`: its limits applied to that state at time 0, as PATCH /admin/limits does;
    `observer(t, engine, controller)`: each virtual second, the run then ending at the horizon;
    `replicas` seeds pooled, each of `expected_count` arrivals: the expected figure, not one draw.
    """
    end = warmup_s + horizon_s
    loop = asyncio.new_event_loop()
    try:
        runs = [
            loop.run_until_complete(
                simulate(
                    partial(
                        WhatIfRun,
                        cal,
                        candidate.limits,
                        spans=[Span(warmup_s, end)],
                        arrivals_until_s=end,
                        seed=seed + 1000 * r,
                        start=start,
                        expected_count=expected_count,
                    ),
                    observer,
                    end if observer is not None else None,
                )
            )[0]
            for r in range(max(1, replicas))
        ]
    finally:
        loop.close()
    return summarise(candidate, runs, ttft_slo_s, itl_slo_s)


def summarise(
    cand: Candidate, raws: list[SpanRun], ttft_slo_s: float, itl_slo_s: float
) -> Prediction:
    """The prediction of `cand` from its runs' measured spans, pooled."""
    window = [r for raw in raws for r in raw.window]
    steps = [s for raw in raws for s in raw.steps]
    tok_per_s = sum(raw.tok_per_s for raw in raws) / len(raws)
    preempt_per_min = sum(raw.preempt_per_min for raw in raws) / len(raws)
    client: list[float] = []
    engine_ttft: list[float] = []
    waits: list[float] = []
    tpots: list[float] = []
    good = 0
    for r in window:
        if r.admit_s is not None:
            waits.append(r.admit_s - r.enter_s)
        if r.first_s is None or r.engine_arrival_s is None:
            continue
        ttft = r.first_s - r.enter_s
        client.append(ttft)
        engine_ttft.append(r.first_s - r.engine_arrival_s)
        tpot = None
        if r.done_s is not None and r.outputs > 1:
            tpot = (r.done_s - r.first_s) / (r.outputs - 1)
            tpots.append(tpot)
        if ttft <= ttft_slo_s and (tpot is None or tpot <= itl_slo_s):
            good += 1
    n = len(window)

    def pct(xs: list[float], q: float) -> float | None:
        return percentile_linear(xs, q)

    return Prediction(
        candidate=cand,
        offered=n,
        completed=sum(1 for r in window if r.done_s is not None),
        rejected=sum(1 for r in window if r.rejected),
        ttft_client_p50_s=pct(client, 50),
        ttft_client_p95_s=pct(client, 95),
        ttft_engine_p50_s=pct(engine_ttft, 50),
        ttft_engine_p95_s=pct(engine_ttft, 95),
        ttft_engine_all=tuple(engine_ttft),
        itl_p95_s=percentile_nearest_rank([d for d, _ in steps], 95, [w for _, w in steps]),
        tpot_mean_s=sum(tpots) / len(tpots) if tpots else None,
        queue_wait_p50_s=pct(waits, 50),
        queue_wait_p95_s=pct(waits, 95),
        goodput_frac=good / n if n else None,
        output_tok_per_s=tok_per_s,
        preemptions_per_min=preempt_per_min,
    )
