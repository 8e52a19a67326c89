"""What `llmtop whatif` does: collect a window, calibrate, predict every candidate, render.

`analyse` is the pure half (points in, report out: the TUI can call it on a worker thread with
points it already has); `run_whatif` adds the scraping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from llmtop.core.base.slo import SloSettings
from llmtop.errors import UsageError
from llmtop.gateway.admission.limits import Limits
from llmtop.whatif.model.calibrate import Calibration, calibrate
from llmtop.whatif.model.predict import Candidate, Options, Prediction, candidates_for_caps, predict
from llmtop.whatif.model.render import Analysis, fit_checks
from llmtop.whatif.model.scenario import State
from llmtop.whatif.model.window import Observed, Point, observe

__all__ = ["Analysis", "Options", "analyse", "fit_window", "options_from", "run_whatif", "state_of"]


def candidates(cal: Calibration, opts: Options) -> list[Candidate]:
    """The current setting, then each cap with the max_queue / timeout changes applied."""
    out = candidates_for_caps(cal, opts.caps)
    if opts.max_queue is None and opts.queue_timeout_s is None:
        return out

    def changed(lim: Limits) -> Limits:
        return replace(
            lim,
            max_queue=lim.max_queue if opts.max_queue is None else opts.max_queue,
            queue_timeout_s=(
                lim.queue_timeout_s if opts.queue_timeout_s is None else opts.queue_timeout_s
            ),
        )

    head, rest = out[0], out[1:]
    if head.limits is not None and not opts.caps:
        return [head, Candidate("current, changed", changed(head.limits))]
    return [head, *(Candidate(c.label, changed(c.limits)) for c in rest if c.limits is not None)]


def state_of(point: Point, arrival_per_s: float, limits: Limits | None) -> State:
    """The system at one scrape: at the engine (running, and waiting for a prefill) and in the
    gateway's queue with the ages it reports (`queued_ages_s`; an older gateway gives only
    `oldest_queued_s`, and one older still nothing: queued / rate seconds, FIFO, at most the
    timeout)."""
    g = point.engine.gauges
    running = round(g.get("running") or 0.0)
    at_engine = running + round(g.get("waiting") or 0.0)
    gw = point.gateway or {}
    queued = int(gw.get("queued") or 0)
    raw = gw.get("queued_ages_s")
    listed = raw if isinstance(raw, list) else []
    ages = tuple(float(a) for a in listed if isinstance(a, int | float))
    oldest_read = gw.get("oldest_queued_s")
    if ages:
        oldest = ages[0]
    elif isinstance(oldest_read, int | float):
        oldest = float(oldest_read)
    else:
        oldest = queued / arrival_per_s if arrival_per_s > 0 else 0.0
        if limits is not None:
            oldest = min(oldest, limits.queue_timeout_s)
    return State(at_engine, queued, oldest, running=running, queued_ages_s=ages)


def fit_window(points: Sequence[Point], opts: Options) -> tuple[Observed, Calibration]:
    """The window summarised and the engine model fitted to it."""
    obs = observe(points)
    if obs.arrival_per_s <= 0:
        raise UsageError("no requests arrived in the window: nothing to predict from")
    cal = calibrate(
        obs, max_num_seqs=opts.max_num_seqs, max_num_batched_tokens=opts.max_num_batched_tokens
    )
    return obs, cal


def analyse(points: Sequence[Point], opts: Options) -> Analysis:
    """Calibrate on the window and predict every candidate (pure, but heavy: the TUI runs it on a
    thread). With `opts.band`, each is also run at the arrival rate one standard error either side
    (a shorter horizon), so the table shows how much the rate's sampling error moves the answer.
    """
    obs, cal = fit_window(points, opts)
    cands = candidates(cal, opts)
    start = state_of(points[-1], cal.arrival_per_s, cal.limits) if opts.from_now else None

    def run(
        c: Candidate, horizon_s: float, at: Calibration = cal, replicas: int = opts.replicas
    ) -> Prediction:
        return predict(
            at,
            c,
            horizon_s=horizon_s,
            warmup_s=opts.warmup_s,
            seed=opts.seed,
            ttft_slo_s=opts.ttft_slo_s,
            itl_slo_s=opts.itl_slo_s,
            start=start,
            replicas=replicas,
        )

    preds = [run(c, opts.horizon_s) for c in cands]
    bands: list[tuple[Prediction, Prediction]] = []
    err = obs.arrival_error_per_s
    if opts.band and err:
        rate = cal.arrival_per_s
        low = replace(cal, arrival_per_s=max(rate - err, rate * 0.1))
        high = replace(cal, arrival_per_s=rate + err)
        half = max(5.0, opts.horizon_s / 2)
        few = max(1, opts.replicas // 2)
        bands = [(run(c, half, low, few), run(c, half, high, few)) for c in cands]
    # The fit's own error: the current setting, replayed (preds[0]), against the window.
    return Analysis(obs, cal, fit_checks(obs, preds[0]), preds, opts, bands, tuple(points))


def options_from(flags: Mapping[str, Any], slo: SloSettings) -> Options:
    """The options from `llmtop whatif`'s parsed flags (by their dests) and the SLO: --steady
    predicts from an empty system after a 30 s warm-up, not from now."""
    steady = flags["steady"]
    return Options(
        caps=flags["cap"],
        max_queue=flags["max_queue"],
        queue_timeout_s=flags["queue_timeout"],
        horizon_s=flags["horizon"],
        from_now=not steady,
        warmup_s=30.0 if steady else 0.0,
        seed=flags["seed"],
        ttft_slo_s=slo.ttft_s,
        itl_slo_s=slo.itl_s,
        max_num_seqs=flags["max_num_seqs"],
        max_num_batched_tokens=flags["max_num_batched_tokens"],
    )


def validate(opts: Options, *, window_s: float, interval_s: float) -> None:
    """UsageError (one line) for values the what-if cannot work with."""
    if not 2.0 <= window_s <= 3600.0:
        raise UsageError("--window-s must be between 2 and 3600 seconds")
    if not 0.2 <= interval_s <= window_s / 2:
        raise UsageError("--interval-s must be at least 0.2 s and at most half the window")
    if not 5.0 <= opts.horizon_s <= 3600.0:
        raise UsageError("--horizon-s must be between 5 and 3600 seconds")
    if opts.max_queue is not None and opts.max_queue < 0:
        raise UsageError("--max-queue must be at least 0")
    if opts.queue_timeout_s is not None and not opts.queue_timeout_s > 0:
        raise UsageError("--queue-timeout-s must be above 0")
    if opts.max_num_seqs < 1:
        raise UsageError("--max-num-seqs must be at least 1")
    if opts.max_num_batched_tokens is not None and opts.max_num_batched_tokens < 1:
        raise UsageError("--max-num-batched-tokens must be at least 1")
    if opts.ttft_slo_s <= 0 or opts.itl_slo_s <= 0:
        raise UsageError("the SLOs must be above 0")


def run_whatif(
    vllm_url: str,
    gateway_url: str | None,
    opts: Options,
    *,
    window_s: float,
    interval_s: float = 1.0,
    token_file: str | None = None,
    transport: Any = None,
) -> Analysis:
    """Scrape the targets over the window, then `analyse`; `transport`: an httpx transport for
    an engine read through a Kubernetes pod proxy."""
    import os

    from llmtop.settings import read_token
    from llmtop.whatif.collect import collect_window

    token = read_token(os.environ.get("LLMTOP_ADMIN_TOKEN"), token_file)

    points = asyncio.run(
        collect_window(
            vllm_url,
            gateway_url,
            window_s=window_s,
            interval_s=interval_s,
            token=token,
            transport=transport,
        )
    )
    try:
        return analyse(points, opts)
    except (ValueError, ArithmeticError) as e:  # a window the model cannot take: say so
        raise UsageError(f"what-if cannot model this window: {e}") from None
