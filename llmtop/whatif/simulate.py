"""The virtual-time run behind every prediction and every ground truth: the engine model
(`llmtop.sim.engine.Engine`) behind the gateway's own `AdmissionController`, on a fake clock.
Pure and deterministic (seeded).

Requests arrive as a Poisson process (`arrival_times`) with lengths drawn from the calibrated
histograms. Each enters the controller (its queue timeouts fire from `expire`, as the app's 50 ms
timer does); the admitted ones go to the engine, which steps back to back. Limits may change at
given times (`Change`, as PATCH /admin/limits does), and the requests offered in each measured
`Span` are kept apart, so one run can hold a calibration window and several caps in a row.

The controller creates asyncio futures for queued tickets, so a run needs an event loop; it
never awaits anything (the caller runs it on a private loop).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from llmtop.errors import Rejected
from llmtop.gateway.admission import AdmissionController, Ticket
from llmtop.gateway.footprint import FootprintModel, PromptShape
from llmtop.gateway.limits import Limits
from llmtop.sim.engine import Engine
from llmtop.whatif.calibrate import Calibration
from llmtop.whatif.lengths import LengthSampler

Observer = Callable[[float, Engine, "AdmissionController | None"], None]

EXPIRE_EVERY_S = 0.05
"""The gateway app calls expire() every 50 ms."""


@dataclass(frozen=True)
class State:
    """What is in the system when the prediction starts ("now"): none = an empty system."""

    at_engine: int
    """Requests running or waiting at the engine (they stay there whatever the new cap)."""
    queued: int
    """Requests waiting in the gateway's queue."""
    oldest_wait_s: float
    """How long the oldest queued request has waited (the queue's ages spread from it to 0
    where `queued_ages_s` does not list them)."""
    running: int = 0
    """Of `at_engine`, how many are running (prompt in the KV cache, decoding); the rest wait
    at the engine for their prefill."""
    queued_ages_s: tuple[float, ...] = ()
    """The ages of the gateway's queued requests, in the order they will be admitted, as the
    gateway reports them (/admin/stats `queued_ages_s`); empty when not reported."""


@dataclass(frozen=True)
class Span:
    """Virtual seconds [start_s, end_s) whose arrivals (and steps, and output) are measured."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class Change:
    """New limits applied at `at_s`, as PATCH /admin/limits does live."""

    at_s: float
    limits: Limits


@dataclass
class Req:
    """One request of the run, on the virtual clock."""

    enter_s: float
    prompt: int
    output: int
    ticket: Ticket | None
    span: int | None
    """The index of the measured span it arrived in; None: outside every span."""
    admit_s: float | None = None
    first_s: float | None = None
    engine_arrival_s: float | None = None
    done_s: float | None = None
    outputs: int = 0
    rejected: bool = False


@dataclass
class SpanRun:
    """One span's requests and steps, and the engine's output and preemptions over it."""

    span: Span
    window: list[Req] = field(default_factory=list)
    steps: list[tuple[float, int]] = field(default_factory=list)
    """(duration, decode tokens) of the steps that started in the span."""
    tok_per_s: float = 0.0
    preempt_per_min: float = 0.0


def arrival_times(rng: random.Random, rate: float, end: float, expected: bool) -> list[float]:
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


def footprint_model(cal: Calibration, seed: int) -> FootprintModel:
    """The gateway's footprint model as it stands after a while: the output quantile learned."""
    fm = FootprintModel(cal.profile.block_size)
    draws = sorted(cal.output_len.sampler(random.Random(seed + 3)).draw() for _ in range(200))
    fm.output_quantile = float(draws[int(0.9 * (len(draws) - 1))])
    return fm


def queued_ages(state: State) -> list[float]:
    """The ages of the inherited queue, head first: as reported, the rest (or all, when the
    gateway reported none) spread evenly from the last known age down to 0."""
    n = state.queued
    listed = list(state.queued_ages_s[:n])
    rest = n - len(listed)
    top = listed[-1] if listed else state.oldest_wait_s
    return listed + [top * (rest - i) / (rest + (1 if listed else 0)) for i in range(rest)]


async def simulate(
    cal: Calibration,
    limits: Limits | None,
    *,
    spans: Sequence[Span],
    arrivals_until_s: float,
    seed: int,
    start: State | None = None,
    changes: Sequence[Change] = (),
    expected_count: bool = True,
    observer: Observer | None = None,
    stop_at_s: float | None = None,
) -> list[SpanRun]:
    """One run: arrivals on [0, arrivals_until_s), `limits` from the start (or, with `start`,
    applied to that state at time 0), each `Change` at its time; then the queue drains.

    `observer(t, engine, controller)` is called once a virtual second; `stop_at_s` ends the run
    there instead of draining (a scrape-only run)."""
    rng = random.Random(seed)
    next_observe = 0.0
    cap_len = cal.max_model_len
    prompts = cal.prompt_len.sampler(random.Random(seed + 1), cap_len - 1)
    outputs = cal.output_len.sampler(random.Random(seed + 2), cap_len - 1)
    engine = Engine(cal.engine_config())
    now = [0.0]
    first_limits = limits
    if limits is not None and start is not None:
        # Build the present under a cap that holds it, then change the limits as PATCH does.
        first_limits = replace(
            limits,
            max_concurrency=max(start.at_engine, 1),
            max_inflight_prompt_tokens=None,
            max_inflight_kv_blocks=None,
        )
    ctl = (
        AdmissionController(first_limits, clock=lambda: now[0], wall_clock=lambda: 0.0)
        if first_limits is not None
        else None
    )
    footprint = footprint_model(cal, seed) if limits is not None else None

    def enter(p: int, out: int) -> Ticket:
        """As the gateway's handler does: the prompt, and its predicted KV footprint."""
        assert ctl is not None
        assert footprint is not None
        shape = PromptShape(p, True, out)
        return ctl.enter(prompt_tokens=p, kv_blocks=footprint.blocks(shape), shape=shape)

    all_limits = [lim for lim in (limits, *(c.limits for c in changes)) if lim is not None]
    timeout = max((lim.queue_timeout_s for lim in all_limits), default=0.0)
    last_end = max((s.end_s for s in spans), default=arrivals_until_s)
    drain_until = max(arrivals_until_s, last_end) + 2.0 * timeout + 30.0
    end = arrivals_until_s
    arrivals = iter(arrival_times(rng, cal.arrival_per_s, end, expected_count))
    next_arrival = next(arrivals, math.inf)
    pending = sorted(changes, key=lambda c: c.at_s)
    queued: deque[Req] = deque()
    runs = [SpanRun(s) for s in spans]
    # Engine counters at each span's start and end: (generation tokens, preemptions).
    marks: list[list[tuple[int, int] | None]] = [[None, None] for _ in spans]
    last_expire = 0.0
    frontend_s = cal.frontend_s
    in_transit: deque[tuple[float, Req]] = deque()  # sent, not yet at the scheduler (FIFO)

    first_start = min((s.start_s for s in spans), default=math.inf)
    last_stop = max((s.end_s for s in spans), default=-math.inf)

    def span_of(t: float) -> int | None:
        for i, s in enumerate(spans):
            if s.start_s <= t < s.end_s:
                return i
        return None

    def add_now(req: Req, t: float) -> None:
        """Into the engine's scheduler; `t` is when it was sent (vLLM's TTFT counts from it)."""
        total = min(req.prompt + req.output, cap_len)
        seq = engine.add_request(req.prompt, max(1, total - req.prompt), arrival_s=t)
        seq.waker = req
        req.engine_arrival_s = t

    def to_engine(req: Req, t: float) -> None:
        """Sent to the engine at `t`: it reaches the scheduler `frontend_s` later."""
        if frontend_s <= 0:
            add_now(req, t)
        else:
            req.engine_arrival_s = t
            in_transit.append((t + frontend_s, req))

    def land(upto: float) -> None:
        while in_transit and in_transit[0][0] <= upto:
            req = in_transit.popleft()[1]
            assert req.engine_arrival_s is not None
            add_now(req, req.engine_arrival_s)

    def arrive(t: float) -> None:
        now[0] = t
        p = prompts.draw()
        req = Req(t, p, outputs.draw(), None, span_of(t))
        if req.span is not None:
            runs[req.span].window.append(req)
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

    edges = sorted(e for s in spans for e in (s.start_s, s.end_s))
    next_edge = [edges[0] if edges else math.inf]

    def mark(t0: float) -> None:
        """Read the engine's counters at each span edge the clock has passed (the hot path
        only compares with the next edge)."""
        st = engine.stats
        for i, s in enumerate(spans):
            for j, edge in enumerate((s.start_s, s.end_s)):
                if marks[i][j] is None and t0 >= edge:
                    marks[i][j] = (st.generation_tokens, st.num_preemptions)
        later = [e for e in edges if e > t0]
        next_edge[0] = later[0] if later else math.inf

    if start is not None:
        _seed_state(start, engine, ctl, prompts, outputs, rng, now, enter, queued, add_now)
        if ctl is not None:
            assert limits is not None
            ctl.set_limits(limits.to_dict())
            dispatch(0.0)

    while True:
        if in_transit:
            land(engine.now)
        if engine.has_work():
            t0 = engine.now
            if t0 >= next_edge[0]:
                mark(t0)
            result = engine.step()
            t1 = engine.now
            while next_arrival < t1 and next_arrival < end:
                arrive(next_arrival)
                next_arrival = next(arrivals, math.inf)
            now[0] = t1
            firsts = 0
            for seq in result.emitted:
                req = seq.waker
                assert isinstance(req, Req)
                if seq.num_output == 1:
                    req.first_s = t1
                    firsts += 1
                    if ctl is not None:
                        admit = req.admit_s if req.admit_s is not None else req.enter_s
                        ctl.record_ttft(t1 - req.enter_s, queue_s=admit - req.enter_s)
            if first_start <= t0 < last_stop:
                i = span_of(t0)
                if i is not None:
                    runs[i].steps.append((t1 - t0, len(result.emitted) - firsts))
            for seq in result.finished:
                req = seq.waker
                assert isinstance(req, Req)
                req.done_s = t1
                req.outputs = seq.num_output
                if req.ticket is not None:
                    req.ticket.release()
        else:
            landing = in_transit[0][0] if in_transit else math.inf
            if landing < math.inf and (landing <= next_arrival or next_arrival >= end):
                t1 = landing
                engine.advance_to(t1)
                land(t1)
            elif next_arrival >= end:
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
            while pending and now[0] >= pending[0].at_s:
                ctl.set_limits(pending.pop(0).limits.to_dict())
            if now[0] - last_expire >= EXPIRE_EVERY_S:
                ctl.expire(now[0])
                last_expire = now[0]
            dispatch(now[0])
        if observer is not None and now[0] >= next_observe:
            observer(now[0], engine, ctl)
            next_observe += 1.0
        if now[0] >= drain_until or (stop_at_s is not None and now[0] >= stop_at_s):
            break
    st = engine.stats
    for run, (m0, m1) in zip(runs, marks, strict=True):
        g0, p0 = m0 or (st.generation_tokens, st.num_preemptions)
        g1, p1 = m1 or (st.generation_tokens, st.num_preemptions)
        length = run.span.end_s - run.span.start_s
        run.tok_per_s = (g1 - g0) / length
        run.preempt_per_min = 60.0 * (p1 - p0) / length
    return runs


def _seed_state(
    start: State,
    engine: Engine,
    ctl: AdmissionController | None,
    prompts: LengthSampler,
    outputs: LengthSampler,
    rng: random.Random,
    now: list[float],
    enter: Callable[[int, int], Ticket],
    queued: deque[Req],
    add_now: Callable[[Req, float], None],
) -> None:
    """Put `start` in place: its running requests decoding (prompt in the KV cache, part of the
    output done), the rest waiting at the engine, and the gateway's queue with its ages."""
    draw_prompt, draw_output = prompts.draw, outputs.draw
    running = min(start.running, start.at_engine)
    for i in range(start.at_engine):
        p = draw_prompt()
        out = draw_output()
        if i < running and out > 1:
            # Somewhere in its output: done so far uniform in [1, out).
            done = 1 + int((out - 1) * rng.random())
            held = Req(0.0, p, out - done, None, None)
            if ctl is not None:
                held.ticket = enter(p, held.output)
            seq = engine.resume(p, out, done, arrival_s=0.0)
            seq.waker = held
            held.engine_arrival_s = 0.0
            continue
        held = Req(0.0, p, max(1, int(out * rng.random())), None, None)
        if ctl is not None:
            held.ticket = enter(p, held.output)
        add_now(held, 0.0)
    if ctl is None:
        return
    for age in queued_ages(start):
        now[0] = -age
        p = draw_prompt()
        held = Req(now[0], p, draw_output(), None, None)
        try:
            held.ticket = enter(p, held.output)
        except Rejected:
            continue
        queued.append(held)
    now[0] = 0.0
