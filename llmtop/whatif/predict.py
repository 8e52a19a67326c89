"""Predict a limit's effect: the calibrated engine model behind the real admission controller,
run in virtual time on the workload arriving now. Pure and deterministic (seeded).

Requests arrive as a Poisson process at the observed rate with lengths drawn from the observed
histograms. Each enters `llmtop.gateway.admission.AdmissionController` (the gateway's own code,
on a fake clock; its queue timeouts fire from `expire`, as the app's 50 ms timer does); the
admitted ones go to `llmtop.sim.engine.Engine`, which steps back to back. Figures are taken over
`horizon_s` after a `warmup_s` that lets the queue and the batch reach their level.

The controller creates asyncio futures for queued tickets, so a run needs an event loop; it
never awaits anything. `predict` makes a private loop, so it can run on any worker thread.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from llmtop.errors import Rejected
from llmtop.gateway.admission import AdmissionController, Ticket
from llmtop.gateway.footprint import FootprintModel, PromptShape
from llmtop.gateway.limits import Limits
from llmtop.load.stats import percentile
from llmtop.sim.engine import Engine
from llmtop.whatif.calibrate import Calibration

Observer = Callable[[float, Engine, "AdmissionController | None"], None]

DEFAULT_MAX_QUEUE = 128
DEFAULT_QUEUE_TIMEOUT_S = 30.0
"""The gateway's defaults (GatewaySettings), for a candidate cap when no gateway was read."""
EXPIRE_EVERY_S = 0.05
"""The gateway app calls expire() every 50 ms."""


@dataclass(frozen=True)
class Candidate:
    """One setting to predict: gateway limits, or None for no gateway (engine only)."""

    label: str
    limits: Limits | None


@dataclass(frozen=True)
class State:
    """What is in the system when the prediction starts ("now"): none = an empty system."""

    at_engine: int
    """Requests running or waiting at the engine (they stay there whatever the new cap)."""
    queued: int
    """Requests waiting in the gateway's queue."""
    oldest_wait_s: float
    """How long the oldest queued request has waited (the queue's ages spread from it to 0)."""


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
    step_mean_s: float | None


@dataclass
class _Req:
    enter_s: float
    prompt: int
    output: int
    ticket: Ticket | None
    in_window: bool
    admit_s: float | None = None
    first_s: float | None = None
    engine_arrival_s: float | None = None
    done_s: float | None = None
    outputs: int = 0
    rejected: bool = False


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
    ttft_slo_s: float = 2.0,
    itl_slo_s: float = 0.1,
    start: State | None = None,
    replicas: int = 1,
    expected_count: bool = True,
    observer: Observer | None = None,
) -> Prediction:
    """Run one candidate in virtual time; safe on any thread (a private event loop).

    With `start`, the run begins from that state and the candidate's limits are applied to it
    at time 0 through `set_limits`, as PATCH /admin/limits does live; figures cover
    [warmup_s, warmup_s + horizon_s). `observer(t, engine, controller)` is called once a
    virtual second (tests scrape with it). `replicas` runs with different traffic seeds are
    pooled, and `expected_count` gives each the expected number of arrivals: a prediction is
    the expected figure, not one draw of the traffic.
    """
    loop = asyncio.new_event_loop()
    try:
        raws = [
            loop.run_until_complete(
                _run(
                    cal,
                    candidate,
                    horizon_s,
                    warmup_s,
                    seed + 1000 * r,
                    start,
                    expected_count,
                    observer,
                )
            )
            for r in range(max(1, replicas))
        ]
    finally:
        loop.close()
    return _summarise(candidate, raws, ttft_slo_s, itl_slo_s)


async def _run(
    cal: Calibration,
    cand: Candidate,
    horizon_s: float,
    warmup_s: float,
    seed: int,
    start: State | None,
    expected_count: bool,
    observer: Observer | None,
) -> _Raw:
    rng = random.Random(seed)
    next_observe = 0.0
    cap_len = cal.max_model_len
    prompts = cal.prompt_len.sampler(random.Random(seed + 1), cap_len - 1)
    outputs = cal.output_len.sampler(random.Random(seed + 2), cap_len - 1)
    engine = Engine(cal.engine_config())
    now = [0.0]
    limits = cand.limits
    if limits is not None and start is not None:
        # Build the present under a cap that holds it, then change the limits as PATCH does.
        limits = replace(
            limits,
            max_concurrency=max(start.at_engine, 1),
            max_inflight_prompt_tokens=None,
            max_inflight_kv_blocks=None,
        )
    ctl = (
        AdmissionController(limits, clock=lambda: now[0], wall_clock=lambda: 0.0)
        if limits is not None
        else None
    )
    footprint = _footprint(cal, seed) if cand.limits is not None else None

    def enter(p: int, out: int) -> Ticket:
        """As the gateway's handler does: the prompt, and its predicted KV footprint."""
        assert ctl is not None
        assert footprint is not None
        shape = PromptShape(p, True, out)
        return ctl.enter(prompt_tokens=p, kv_blocks=footprint.blocks(shape), shape=shape)

    end = warmup_s + horizon_s
    drain_until = end + (2.0 * cand.limits.queue_timeout_s if cand.limits else 0.0) + 30.0
    rate = cal.arrival_per_s
    arrivals = iter(_arrival_times(rng, rate, end, expected_count))
    next_arrival = next(arrivals, math.inf)
    queued: deque[_Req] = deque()
    window: list[_Req] = []
    steps: list[tuple[float, int]] = []  # (duration, decode tokens) of the steps in the window
    gen0 = pre0 = None
    gen1 = pre1 = None
    last_expire = 0.0

    def to_engine(req: _Req, t: float) -> None:
        total = min(req.prompt + req.output, cap_len)
        seq = engine.add_request(req.prompt, max(1, total - req.prompt), arrival_s=t)
        seq.waker = req
        req.engine_arrival_s = t

    def arrive(t: float) -> None:
        now[0] = t
        p = prompts.draw()
        req = _Req(t, p, outputs.draw(), None, warmup_s <= t < end)
        if req.in_window:
            window.append(req)
        if ctl is None:
            to_engine(req, t)
            return
        try:
            req.ticket = enter(p, req.output)
        except Rejected:
            req.rejected = True
            return
        if req.ticket.admitted:
            req.admit_s = t
            to_engine(req, t)
        else:
            queued.append(req)

    def dispatch(t: float) -> None:
        while queued:
            head = queued[0]
            assert head.ticket is not None
            if head.ticket.queued:
                return
            queued.popleft()
            if head.ticket.admitted:
                head.admit_s = t
                to_engine(head, t)
            else:
                head.rejected = True

    if start is not None:
        for _ in range(start.at_engine):
            p = prompts.draw()
            held = _Req(0.0, p, max(1, int(outputs.draw() * rng.random())), None, False)
            if ctl is not None:
                held.ticket = enter(p, held.output)
            to_engine(held, 0.0)
        if ctl is not None:
            n = start.queued
            for i in range(n):
                now[0] = -start.oldest_wait_s * (n - i) / n
                p = prompts.draw()
                held = _Req(now[0], p, outputs.draw(), None, False)
                try:
                    held.ticket = enter(p, held.output)
                except Rejected:
                    continue
                queued.append(held)
            now[0] = 0.0
            assert cand.limits is not None
            ctl.set_limits(cand.limits.to_dict())
            dispatch(0.0)

    while True:
        if engine.has_work():
            t0 = engine.now
            if gen0 is None and t0 >= warmup_s:
                gen0, pre0 = engine.stats.generation_tokens, engine.stats.num_preemptions
            if gen1 is None and t0 >= end:
                gen1, pre1 = engine.stats.generation_tokens, engine.stats.num_preemptions
            result = engine.step()
            t1 = engine.now
            while next_arrival < t1 and next_arrival < end:
                arrive(next_arrival)
                next_arrival = next(arrivals, math.inf)
            now[0] = t1
            firsts = 0
            for seq in result.emitted:
                req = seq.waker
                assert isinstance(req, _Req)
                if seq.num_output == 1:
                    req.first_s = t1
                    firsts += 1
                    if ctl is not None:
                        admit = req.admit_s if req.admit_s is not None else req.enter_s
                        ctl.record_ttft(t1 - req.enter_s, queue_s=admit - req.enter_s)
            if warmup_s <= t0 < end:
                steps.append((t1 - t0, len(result.emitted) - firsts))
            for seq in result.finished:
                req = seq.waker
                assert isinstance(req, _Req)
                req.done_s = t1
                req.outputs = seq.num_output
                if req.ticket is not None:
                    req.ticket.release()
        else:
            if next_arrival >= end:
                if ctl is None or not queued:
                    break
                t1 = now[0] + EXPIRE_EVERY_S  # nothing runs: only timeouts move the queue
            else:
                t1 = next_arrival
                engine.advance_to(t1)
                arrive(t1)
                next_arrival = next(arrivals, math.inf)
            now[0] = t1
        if ctl is not None:
            if now[0] - last_expire >= EXPIRE_EVERY_S:
                ctl.expire(now[0])
                last_expire = now[0]
            dispatch(now[0])
        if observer is not None and now[0] >= next_observe:
            observer(now[0], engine, ctl)
            next_observe += 1.0
        if now[0] >= drain_until or (observer is not None and now[0] >= end):
            break
    stats = engine.stats
    if gen0 is None:
        gen0, pre0 = stats.generation_tokens, stats.num_preemptions
    if gen1 is None:
        gen1, pre1 = stats.generation_tokens, stats.num_preemptions
    assert pre0 is not None
    assert pre1 is not None
    return _Raw(window, steps, (gen1 - gen0) / horizon_s, 60.0 * (pre1 - pre0) / horizon_s)


def _arrival_times(rng: random.Random, rate: float, end: float, expected: bool) -> list[float]:
    """Poisson arrivals on [0, end). With `expected`, given their expected count: a Poisson
    process conditioned on its count is that many uniform times, so the burstiness stays and
    only the count's own sampling noise (the rate is already an estimate) is taken out of the
    prediction. Without, a plain Poisson process (the ground truth's traffic)."""
    if rate <= 0:
        return []
    if not expected:
        out: list[float] = []
        t = rng.expovariate(rate)
        while t < end:
            out.append(t)
            t += rng.expovariate(rate)
        return out
    mean = rate * end
    n = int(mean) + (1 if rng.random() < mean - int(mean) else 0)
    return sorted(rng.uniform(0.0, end) for _ in range(n))


@dataclass
class _Raw:
    """One replica's requests and steps in the window, and its rates."""

    window: list[_Req]
    steps: list[tuple[float, int]]
    tok_per_s: float
    preempt_per_min: float


def _footprint(cal: Calibration, seed: int) -> FootprintModel:
    """The gateway's footprint model as it stands after a while: the output quantile learned."""
    fm = FootprintModel(cal.profile.block_size)
    draws = sorted(cal.output_len.sampler(random.Random(seed + 3)).draw() for _ in range(200))
    fm.output_quantile = float(draws[int(0.9 * (len(draws) - 1))])
    return fm


def _weighted_quantile(pairs: list[tuple[float, int]], q: float) -> float | None:
    total = sum(w for _, w in pairs)
    if total <= 0:
        return None
    rank = q * total
    acc = 0
    for value, w in sorted(pairs):
        acc += w
        if acc >= rank:
            return value
    return max(v for v, _ in pairs)


def _summarise(
    cand: Candidate, raws: list[_Raw], ttft_slo_s: float, itl_slo_s: float
) -> Prediction:
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
        return percentile(xs, q)

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
        itl_p95_s=_weighted_quantile(steps, 0.95),
        tpot_mean_s=sum(tpots) / len(tpots) if tpots else None,
        queue_wait_p50_s=pct(waits, 50),
        queue_wait_p95_s=pct(waits, 95),
        goodput_frac=good / n if n else None,
        output_tok_per_s=tok_per_s,
        preemptions_per_min=preempt_per_min,
        step_mean_s=sum(d for d, _ in steps) / len(steps) if steps else None,
    )
