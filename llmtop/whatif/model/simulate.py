"""The virtual-time run behind every prediction and ground truth: the engine model behind the
gateway's own `AdmissionController` on a fake clock, seeded; Poisson arrivals (scenario.py gives
the rest). Limits change at given times (`Change`) and each `Span` is measured apart, so one run
can hold a calibration window and several caps in a row.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from llmtop.errors import Rejected
from llmtop.gateway.admission.controller import AdmissionController, Ticket
from llmtop.gateway.admission.footprint import FootprintModel, PromptShape
from llmtop.gateway.admission.limits import Limits
from llmtop.sim.model import Engine
from llmtop.whatif.model.calibrate import Calibration
from llmtop.whatif.model.scenario import Change, Span, State, arrival_times, queued_ages

Observer = Callable[[float, Engine, "AdmissionController | None"], None]

EXPIRE_EVERY_S = 0.05
"""The gateway app calls expire() every 50 ms."""


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


def footprint_model(cal: Calibration, seed: int) -> FootprintModel:
    """The gateway's footprint model as it stands after a while: the output quantile learned."""
    fm = FootprintModel(cal.profile.block_size)
    draws = sorted(cal.output_len.sampler(random.Random(seed + 3)).draw() for _ in range(200))
    fm.output_quantile = float(draws[int(0.9 * (len(draws) - 1))])
    return fm


async def simulate(
    make: Callable[[], WhatIfRun], observer: Observer | None = None, stop_at_s: float | None = None
) -> list[SpanRun]:
    """Build a run inside the event loop (queued tickets are its futures) and step it to the end.

    `observer(t, engine, controller)` is called once a virtual second; `stop_at_s` ends the run
    there instead of draining (a scrape-only run)."""
    return make().run(observer, stop_at_s)


class WhatIfRun:
    """One run in virtual time: the engine, the controller (None: no gateway), the requests on their
    way and what each span saw, built at time 0 (with `start`, on that state); `run` steps it until
    the queue drains. Arrivals on [0, arrivals_until_s), `limits` from the start, each `Change` at
    its time. Needs a running event loop (queued tickets are futures), though nothing is awaited.
    """

    def __init__(
        self,
        cal: Calibration,
        limits: Limits | None,
        *,
        spans: Sequence[Span],
        arrivals_until_s: float,
        seed: int,
        start: State | None = None,
        changes: Sequence[Change] = (),
        expected_count: bool = True,
    ) -> None:
        self.rng = random.Random(seed)
        self.cap_len = cal.max_model_len
        """Prompt plus output never exceeds the model's context."""
        self.prompts = cal.prompt_len.sampler(random.Random(seed + 1), self.cap_len - 1)
        self.outputs = cal.output_len.sampler(random.Random(seed + 2), self.cap_len - 1)
        self.engine = Engine(cal.engine_config())
        self.now = 0.0
        """The virtual clock (the controller's too)."""
        first_limits = limits
        if limits is not None and start is not None:
            # Build the present under a cap that holds it, then change the limits as PATCH does.
            first_limits = replace(
                limits,
                max_concurrency=max(start.at_engine, 1),
                max_inflight_prompt_tokens=None,
                max_inflight_kv_blocks=None,
            )
        self.ctl = (
            AdmissionController(first_limits, clock=self.clock, wall_clock=lambda: 0.0)
            if first_limits is not None
            else None
        )
        self.footprint = footprint_model(cal, seed) if limits is not None else None
        all_limits = [lim for lim in (limits, *(c.limits for c in changes)) if lim is not None]
        timeout = max((lim.queue_timeout_s for lim in all_limits), default=0.0)
        last_end = max((s.end_s for s in spans), default=arrivals_until_s)
        self.drain_until = max(arrivals_until_s, last_end) + 2.0 * timeout + 30.0
        """The run ends here at the latest (the queue has drained well before)."""
        self.end = arrivals_until_s
        """No arrival at or after this time."""
        self.arrivals = iter(arrival_times(self.rng, cal.arrival_per_s, self.end, expected_count))
        self.next_arrival = next(self.arrivals, math.inf)
        self.pending = sorted(changes, key=lambda c: c.at_s)
        """The limit changes still to apply, in time order."""
        self.queued: deque[Req] = deque()
        """Requests waiting in the gateway's queue, in the order they were queued."""
        self.spans = list(spans)
        self.runs = [SpanRun(s) for s in spans]
        self.marks: list[list[tuple[int, int] | None]] = [[None, None] for _ in spans]
        """Engine counters at each span's start and end: (generation tokens, preemptions)."""
        self.last_expire = 0.0
        self.frontend_s = cal.frontend_s
        self.in_transit: deque[tuple[float, Req]] = deque()
        """Sent, not yet at the scheduler (FIFO): (when it lands, the request)."""
        self.first_start = min((s.start_s for s in spans), default=math.inf)
        self.last_stop = max((s.end_s for s in spans), default=-math.inf)
        self.edges = sorted(e for s in spans for e in (s.start_s, s.end_s))
        self.next_edge = self.edges[0] if self.edges else math.inf
        """The next span edge whose engine counters are still to read."""
        if start is not None:
            self.seed_state(start)
            if self.ctl is not None:
                assert limits is not None
                self.ctl.set_limits(limits.to_dict())
                self.dispatch(0.0)

    def clock(self) -> float:
        return self.now

    def span_of(self, t: float) -> int | None:
        for i, s in enumerate(self.spans):
            if s.start_s <= t < s.end_s:
                return i
        return None

    def enter(self, p: int, out: int) -> Ticket:
        """As the gateway's handler does: the prompt, and its predicted KV footprint."""
        assert self.ctl is not None
        assert self.footprint is not None
        shape = PromptShape(p, True, out)
        return self.ctl.enter(prompt_tokens=p, kv_blocks=self.footprint.blocks(shape), shape=shape)

    def add_now(self, req: Req, t: float) -> None:
        """Into the engine's scheduler; `t` is when it was sent (vLLM's TTFT counts from it)."""
        total = min(req.prompt + req.output, self.cap_len)
        seq = self.engine.add_request(req.prompt, max(1, total - req.prompt), arrival_s=t)
        seq.waker = req
        req.engine_arrival_s = t

    def to_engine(self, req: Req, t: float) -> None:
        """Sent to the engine at `t`: it reaches the scheduler `frontend_s` later."""
        if self.frontend_s <= 0:
            self.add_now(req, t)
        else:
            req.engine_arrival_s = t
            self.in_transit.append((t + self.frontend_s, req))

    def land(self, upto: float) -> None:
        """The requests in transit that reach the scheduler by `upto`."""
        in_transit = self.in_transit
        while in_transit and in_transit[0][0] <= upto:
            req = in_transit.popleft()[1]
            assert req.engine_arrival_s is not None
            self.add_now(req, req.engine_arrival_s)

    def arrive(self, t: float) -> None:
        """A new request at `t`: into the controller (admitted, queued or refused)."""
        self.now = t
        p = self.prompts.draw()
        req = Req(t, p, self.outputs.draw(), None, self.span_of(t))
        if req.span is not None:
            self.runs[req.span].window.append(req)
        if self.ctl is None:
            self.to_engine(req, t)
            return
        try:
            req.ticket = self.enter(p, req.output)
        except Rejected:
            req.rejected = True
            return
        if req.ticket.admitted:
            req.admit_s = t
            self.to_engine(req, t)
        else:
            self.queued.append(req)

    def dispatch(self, t: float) -> None:
        """Send on the queued requests the controller admitted; note those it refused."""
        queued = self.queued
        while queued:
            head = queued[0]
            assert head.ticket is not None
            if head.ticket.queued:
                return
            queued.popleft()
            if head.ticket.admitted:
                head.admit_s = t
                self.to_engine(head, t)
            else:
                head.rejected = True

    def mark(self, t0: float) -> None:
        """Read the engine's counters at each span edge the clock has passed (the hot path
        only compares with the next edge)."""
        st = self.engine.stats
        for i, s in enumerate(self.spans):
            for j, edge in enumerate((s.start_s, s.end_s)):
                if self.marks[i][j] is None and t0 >= edge:
                    self.marks[i][j] = (st.generation_tokens, st.num_preemptions)
        later = [e for e in self.edges if e > t0]
        self.next_edge = later[0] if later else math.inf

    def run(self, observer: Observer | None, stop_at_s: float | None) -> list[SpanRun]:
        """Step to the end (drained, or `stop_at_s`); each span's requests, steps and rates."""
        next_observe = 0.0
        engine, ctl = self.engine, self.ctl
        while True:
            if self.in_transit:
                self.land(engine.now)
            if engine.has_work():
                self.step()
            elif not self.idle():
                break
            now = self.now
            if ctl is not None:
                while self.pending and now >= self.pending[0].at_s:
                    ctl.set_limits(self.pending.pop(0).limits.to_dict())
                if now - self.last_expire >= EXPIRE_EVERY_S:
                    ctl.expire(now)
                    self.last_expire = now
                self.dispatch(now)
            if observer is not None and now >= next_observe:
                observer(now, engine, ctl)
                next_observe += 1.0
            if now >= self.drain_until or (stop_at_s is not None and now >= stop_at_s):
                break
        st = engine.stats
        for run, (m0, m1) in zip(self.runs, self.marks, strict=True):
            g0, p0 = m0 or (st.generation_tokens, st.num_preemptions)
            g1, p1 = m1 or (st.generation_tokens, st.num_preemptions)
            length = run.span.end_s - run.span.start_s
            run.tok_per_s = (g1 - g0) / length
            run.preempt_per_min = 60.0 * (p1 - p0) / length
        return self.runs

    def step(self) -> None:
        """One engine step; the arrivals during it; its first tokens and finished requests."""
        engine, ctl = self.engine, self.ctl
        t0 = engine.now
        if t0 >= self.next_edge:
            self.mark(t0)
        result = engine.step()
        t1 = engine.now
        while self.next_arrival < t1 and self.next_arrival < self.end:
            self.arrive(self.next_arrival)
            self.next_arrival = next(self.arrivals, math.inf)
        self.now = t1
        firsts = 0
        for seq in result.emitted:
            req = seq.waker
            assert isinstance(req, Req)
            if seq.num_output == 1:
                req.first_s = t1
                firsts += 1
                if ctl is not None:
                    if req.ticket is not None:
                        req.ticket.first_token()  # its prompt leaves the prefill backlog
                    admit = req.admit_s if req.admit_s is not None else req.enter_s
                    ctl.record_ttft(t1 - req.enter_s, queue_s=admit - req.enter_s)
        if self.first_start <= t0 < self.last_stop:
            i = self.span_of(t0)
            if i is not None:
                self.runs[i].steps.append((t1 - t0, len(result.emitted) - firsts))
        for seq in result.finished:
            req = seq.waker
            assert isinstance(req, Req)
            req.done_s = t1
            req.outputs = seq.num_output
            if req.ticket is not None:
                req.ticket.release()

    def idle(self) -> bool:
        """The engine has nothing to do: move the clock to what happens next (a request
        landing, an arrival, or a queue timeout's tick); False when nothing ever will."""
        landing = self.in_transit[0][0] if self.in_transit else math.inf
        if landing < math.inf and (landing <= self.next_arrival or self.next_arrival >= self.end):
            t1 = landing
            self.engine.advance_to(t1)
            self.land(t1)
        elif self.next_arrival >= self.end:
            if self.ctl is None or not self.queued:
                return False
            t1 = self.now + EXPIRE_EVERY_S  # nothing runs: only timeouts move the queue
        else:
            t1 = self.next_arrival
            self.engine.advance_to(t1)
            self.arrive(t1)
            self.next_arrival = next(self.arrivals, math.inf)
        self.now = t1
        return True

    def seed_state(self, start: State) -> None:
        """Put `start` in place: its running requests decoding (prompt in the KV cache, part of
        the output done), the rest waiting at the engine, and the gateway's queue with its ages."""
        draw_prompt, draw_output = self.prompts.draw, self.outputs.draw
        rng, ctl = self.rng, self.ctl
        running = min(start.running, start.at_engine)
        for i in range(start.at_engine):
            p = draw_prompt()
            out = draw_output()
            if i < running and out > 1:
                # Somewhere in its output: done so far uniform in [1, out).
                done = 1 + int((out - 1) * rng.random())
                held = Req(0.0, p, out - done, None, None)
                if ctl is not None:
                    held.ticket = self.enter(p, held.output)
                seq = self.engine.resume(p, out, done, arrival_s=0.0)
                seq.waker = held
                held.engine_arrival_s = 0.0
                continue
            held = Req(0.0, p, max(1, int(out * rng.random())), None, None)
            if ctl is not None:
                held.ticket = self.enter(p, held.output)
            self.add_now(held, 0.0)
        if ctl is None:
            return
        for age in queued_ages(start):
            self.now = -age
            p = draw_prompt()
            held = Req(self.now, p, draw_output(), None, None)
            try:
                held.ticket = self.enter(p, held.output)
            except Rejected:
                continue
            self.queued.append(held)
        self.now = 0.0
