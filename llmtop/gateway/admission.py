"""Admission control: at most `max_concurrency` requests at the engine, the rest in a bounded,
prioritised queue that can be seen, timed out, shed and changed live.

Pure asyncio, no HTTP and no timers: the clock is injected and queue timeouts fire when the
owner calls `expire()` (the app does every 50 ms; tests advance a fake clock and call it).

Every request that `enter`s ends in exactly one outcome: completed, rejected (with a reason),
timed_out, cancelled or upstream_error; so offered == sum(outcomes) + in_flight + queued.

Ordering is strict: the head of the queue (highest priority, then oldest) goes first, and when
the token or KV budget does not fit the head, nobody behind it jumps ahead (no starvation of long
prompts). A prompt larger than the whole budget is admitted alone, when nothing is in flight.

Queue policies (limits.queue_policy): fifo waits up to queue_timeout_s; deadline gives each
request a TTFT budget (ttft_slo_s less the engine's recent TTFT), refuses at arrival one whose
predicted start (backlog ahead / measured drain rate) is past it, and takes a waiter out when
its budget is gone; codel and lifo are Fail at Scale's controlled delay and adaptive LIFO, kept
for the comparison in bench/bench_autopilot.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

from llmtop.errors import Rejected
from llmtop.gateway.footprint import FootprintModel, PromptShape
from llmtop.gateway.limits import LimitError, Limits, validate_limits
from llmtop.gateway.ratelimit import TenantRateLimiter
from llmtop.gateway.window import CumulativeHistogram, RateWindow, SampleWindow

__all__ = [
    "OUTCOMES",
    "PRIORITIES",
    "REJECT_REASONS",
    "AdmissionController",
    "LimitError",
    "Limits",
    "Rejected",
    "Ticket",
    "validate_limits",
]

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")
"""Highest first; the header x-llmtop-priority takes one of these."""
OUTCOMES: tuple[str, ...] = ("completed", "rejected", "timed_out", "cancelled", "upstream_error")
REJECT_REASONS: tuple[str, ...] = (
    "queue_full",
    "displaced",
    "shed",
    "rate_limited",
    "ttft_budget",
)
AUTOPILOT = "autopilot"
"""The source of the autopilot's own changes; any other source changing a lever it moves
switches the mode to manual."""
LEVERS = ("max_concurrency", "max_inflight_kv_blocks", "max_inflight_prompt_tokens")
DRAIN_WINDOW_S = 10
"""Seconds of completions the deadline queue's drain rate (KV blocks freed per second) spans."""
ENGINE_TTFT_GAIN = 0.1
"""Smoothing of the engine-side TTFT estimate per sample (about the last 10 first tokens)."""
CODEL_SHORT = 0.25
"""codel/lifo: a congested queue's timeout, as a share of the TTFT budget."""
_RANK = {p: i for i, p in enumerate(PRIORITIES)}
_QUEUED, _IN_FLIGHT, _DONE = 0, 1, 2


QUEUED_AGES_LISTED = 1000
"""/admin/stats lists the ages of at most this many waiting requests (the head of the queue)."""
UNKNOWN_DRAIN_RETRY_S = 5.0
"""Retry-After when no request has completed recently (no drain rate to estimate from)."""


class Ticket:
    """One request's place: queued, then in flight, then done; `release` ends it exactly once."""

    __slots__ = (
        "_ctl",
        "_future",
        "_key",
        "_result",
        "admitted_at",
        "deadline",
        "enqueued_at",
        "kv_blocks",
        "priority",
        "prompt_tokens",
        "shape",
        "state",
        "tenant",
    )

    def __init__(
        self, ctl: AdmissionController, priority: str, prompt_tokens: int, now: float
    ) -> None:
        self._ctl = ctl
        self.priority = priority
        self.prompt_tokens = prompt_tokens
        self.enqueued_at = now
        self.admitted_at: float | None = None
        self.state = _QUEUED
        self.tenant: str | None = None
        self.kv_blocks = 0
        self.deadline: float | None = None
        self.shape: PromptShape | None = None
        self._key = 0
        self._future: asyncio.Future[Rejected | None] | None = None
        self._result: Rejected | None = None

    @property
    def admitted(self) -> bool:
        return self.state == _IN_FLIGHT or (self.state == _DONE and self.admitted_at is not None)

    @property
    def queued(self) -> bool:
        return self.state == _QUEUED

    @property
    def queue_wait_s(self) -> float:
        """Seconds spent queued (0 when admitted at once)."""
        end = self.admitted_at if self.admitted_at is not None else self._ctl._clock()
        return end - self.enqueued_at

    async def wait(self) -> None:
        """Return once admitted; raise Rejected (timed out, displaced, shed). Cancelling the
        waiting task takes the request out of the queue (or frees its slot) as `cancelled`."""
        if self.state == _IN_FLIGHT:
            return
        if self.state == _DONE:
            if self._result is not None:
                raise self._result
            return
        assert self._future is not None
        try:
            result = await self._future
        except asyncio.CancelledError:
            self._ctl._cancel(self)
            raise
        if result is not None:
            raise result

    def cancel(self) -> None:
        """The client is gone: leave the queue or free the slot, as `cancelled`. Idempotent;
        a no-op once the request has ended."""
        self._ctl._cancel(self)

    def release(self, outcome: str = "completed") -> None:
        """End an admitted request: completed, cancelled or upstream_error. Idempotent."""
        self._ctl._release(self, outcome)


class AdmissionController:
    """The gateway's admission state: limits, the priority queue, counters and recent figures."""

    def __init__(
        self,
        limits: Limits,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        window_s: int = 60,
        max_events: int = 200,
    ) -> None:
        self._limits = validate_limits(limits, limits.to_dict())
        self._clock = clock
        self._wall = wall_clock
        self.window_s = window_s
        self._queues: dict[str, OrderedDict[int, Ticket]] = {p: OrderedDict() for p in PRIORITIES}
        self._seq = itertools.count()
        self.queued = 0
        self.in_flight = 0
        self.in_flight_prompt_tokens = 0
        self.in_flight_kv_blocks = 0
        self.offered = 0
        self.paused = False
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.rejections = dict.fromkeys(REJECT_REASONS, 0)
        self._rate = (
            TenantRateLimiter(limits.rate_limit_rpm) if limits.rate_limit_rpm is not None else None
        )
        self._drain = RateWindow(10)
        self._drain_blocks = RateWindow(DRAIN_WINDOW_S)
        self._empty_since = clock()
        self.engine_ttft_s = 0.0
        """Recent engine-side TTFT (arrival at the engine to first byte), smoothed."""
        self.footprint: FootprintModel | None = None
        """Set by the owner when KV-footprint admission is used; learns from admissions."""
        self.tenant_ttft_slo_s: dict[str, float] = {}
        """Per-tenant TTFT budgets (the gateway's config), over limits.ttft_slo_s."""
        self.autopilot: dict[str, Any] | None = None
        """The autopilot's last state for /admin/stats (budget, reason), set by its driver."""
        self.share_slots: int | None = None
        self.share_kv_blocks: int | None = None
        """This gateway's share of limits held elsewhere (Redis grants, the live replicas'
        room): admission takes the smaller of these and the limits; None = no such cap."""
        self.on_demand: Callable[[], None] | None = None
        """Called when a request waits for room or one ends, so a shared-limits driver can
        ask for more room or give some back (gateway/shared.py)."""
        self.queue_wait = SampleWindow(window_s)
        self.ttft = SampleWindow(window_s)
        self.queue_wait_hist = CumulativeHistogram()
        self.ttft_hist = CumulativeHistogram()
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)

    @property
    def limits(self) -> Limits:
        return self._limits

    # -- arrival -------------------------------------------------------------------------------

    def enter(
        self,
        priority: str = "normal",
        *,
        tenant: str | None = None,
        prompt_tokens: int = 0,
        kv_blocks: int = 0,
        shape: PromptShape | None = None,
        ttft_slo_s: float | None = None,
        rate_checked: bool = False,
    ) -> Ticket:
        """Admit at once, queue, or raise Rejected; await `ticket.wait()` when it is queued.

        `kv_blocks` is the request's predicted KV footprint (footprint.py); `ttft_slo_s`
        overrides the limits' TTFT budget for this request (a tenant's own SLO);
        `rate_checked`: the tenant's rate was checked elsewhere (in Redis, for all gateways)."""
        if priority not in _RANK:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        now = self._clock()
        self.offered += 1
        ticket = Ticket(self, priority, prompt_tokens, now)
        ticket.tenant = tenant
        ticket.kv_blocks = kv_blocks
        ticket.shape = shape
        lim = self._limits
        if self._rate is not None and not rate_checked:
            wait_s = self._rate.check(tenant or "", now)
            if wait_s > 0:
                msg = f"rate limited: over {lim.rate_limit_rpm:g} requests/min (rate_limit_rpm)"
                raise self._reject(ticket, Rejected("rate_limited", msg, wait_s))
        if self.queued == 0 and self._fits(prompt_tokens, kv_blocks):
            self._start(ticket, now)
            return ticket
        slo = ttft_slo_s
        if slo is None:
            slo = self.tenant_ttft_slo_s.get(tenant or "", lim.ttft_slo_s)
        if slo is not None and lim.queue_policy != "fifo":
            budget = self.queue_budget_s(slo)
            ticket.deadline = now + budget
            wait = self.predict_wait_s(priority, kv_blocks, now)
            if lim.queue_policy == "deadline" and wait is not None and wait > budget:
                msg = (
                    f"over the TTFT budget: predicted start in {wait:.1f}s, budget {budget:.1f}s"
                    f" of {slo:g}s (ttft_slo_s); capacity expected in {wait - budget:.1f}s"
                )
                raise self._reject(ticket, Rejected("ttft_budget", msg, wait - budget))
        if self.queued >= lim.max_queue:
            victim = self._newest_below(priority)
            if victim is None:
                msg = f"queue full: {self.queued}/{lim.max_queue} waiting (max_queue)"
                raise self._reject(ticket, Rejected("queue_full", msg, self.retry_after_s(now)))
            msg = (
                f"displaced by a {priority}-priority request: queue full "
                f"{self.queued}/{lim.max_queue} waiting (max_queue)"
            )
            self._unqueue(victim)
            self._finish(victim, Rejected("displaced", msg, self.retry_after_s(now)))
        ticket._key = next(self._seq)
        ticket._future = asyncio.get_running_loop().create_future()
        self._queues[priority][ticket._key] = ticket
        self.queued += 1
        self._dispatch(now)
        if ticket.state == _QUEUED and self.on_demand is not None:
            self.on_demand()
        return ticket

    def refuse(self, reason: str, message: str, retry_after_s: float) -> Rejected:
        """Count a request refused before admission's own checks (a rate limit held in Redis)
        as offered and rejected; the exception to raise."""
        self.offered += 1
        self.outcomes["rejected"] += 1
        self.rejections[reason] += 1
        return Rejected(reason, message, retry_after_s)

    async def acquire(
        self, priority: str = "normal", *, tenant: str | None = None, prompt_tokens: int = 0
    ) -> Ticket:
        """`enter` and wait for admission; the returned ticket is in flight."""
        ticket = self.enter(priority, tenant=tenant, prompt_tokens=prompt_tokens)
        await ticket.wait()
        return ticket

    def retry_after_s(self, now: float | None = None) -> float:
        """Seconds until the current backlog has drained at the recent completion rate."""
        now = self._clock() if now is None else now
        rate = self._drain.rate(now)
        if not rate:
            # Nothing has completed recently, so there is no rate to go by: a short guess keeps
            # well-behaved clients from sleeping a whole queue_timeout on an idle-then-busy gateway.
            return max(1.0, min(self._limits.queue_timeout_s, UNKNOWN_DRAIN_RETRY_S))
        return max(1.0, min((self.queued + 1) / rate, 3600.0))

    # -- the queue -----------------------------------------------------------------------------

    def drain_rate(self) -> float | None:
        """Requests finished per second lately (None before the first)."""
        return self._drain.rate(self._clock())

    def queue_budget_s(self, slo_s: float) -> float:
        """Seconds a request may wait in the queue and still meet a TTFT of `slo_s`."""
        return max(0.0, slo_s - self.engine_ttft_s)

    def predict_wait_s(self, priority: str, kv_blocks: int, now: float) -> float | None:
        """When a request arriving now would start: the backlog ahead of it (same or higher
        priority) beyond what the limits have free, over the measured drain rate. None when
        nothing has drained lately (no rate to go by)."""
        lim = self._limits
        rank = _RANK[priority]
        ahead = [t for p in PRIORITIES[: rank + 1] for t in self._queues[p].values()]
        waits = [0.0]
        need = len(ahead) + 1 - (lim.max_concurrency - self.in_flight)
        if need > 0:
            rate = self._drain.rate(now)
            if not rate:
                return None
            waits.append(need / rate)
        if lim.max_inflight_kv_blocks is not None:
            blocks = sum(t.kv_blocks for t in ahead) + kv_blocks
            need_b = blocks - (lim.max_inflight_kv_blocks - self.in_flight_kv_blocks)
            if need_b > 0:
                rate_b = self._drain_blocks.rate(now)
                if not rate_b:
                    return None
                waits.append(need_b / rate_b)
        return max(waits)

    def set_share(self, slots: int | None, kv_blocks: int | None) -> None:
        """This gateway's share of the limits (see `share_slots`); admits the queue into it."""
        self.share_slots, self.share_kv_blocks = slots, kv_blocks
        self._dispatch(self._clock())

    def demand(self) -> tuple[int, int]:
        """Slots and KV blocks this gateway would use now: in flight plus queued."""
        blocks = sum(t.kv_blocks for q in self._queues.values() for t in q.values())
        return self.in_flight + self.queued, self.in_flight_kv_blocks + blocks

    def _fits(self, prompt_tokens: int, kv_blocks: int) -> bool:
        lim = self._limits
        if self.paused or self.in_flight >= lim.max_concurrency:
            return False
        share = self.share_slots
        if share is not None and self.in_flight >= share:
            return False
        share_kv = self.share_kv_blocks
        if share_kv is not None and self.in_flight_kv_blocks + kv_blocks > share_kv:
            whole = lim.max_inflight_kv_blocks
            if self.in_flight or whole is None or share_kv < whole:
                return False
        if self.in_flight == 0:
            return True
        budget = lim.max_inflight_prompt_tokens
        if budget is not None and self.in_flight_prompt_tokens + prompt_tokens > budget:
            return False
        kv = lim.max_inflight_kv_blocks
        return kv is None or self.in_flight_kv_blocks + kv_blocks <= kv

    def congested(self, now: float) -> bool:
        """codel's test: the queue has not been empty for a whole TTFT budget."""
        slo = self._limits.ttft_slo_s
        interval = self.queue_budget_s(slo) if slo is not None else self._limits.queue_timeout_s
        return self.queued > 0 and now - self._empty_since > interval

    def _head(self) -> Ticket | None:
        lifo = self._limits.queue_policy == "lifo" and self.congested(self._clock())
        for p in PRIORITIES:
            q = self._queues[p]
            if q:
                return q[next(reversed(q))] if lifo else next(iter(q.values()))
        return None

    def _newest_below(self, priority: str) -> Ticket | None:
        """The newest waiter of the lowest priority strictly below `priority`."""
        for p in reversed(PRIORITIES):
            if _RANK[p] <= _RANK[priority]:
                return None
            q = self._queues[p]
            if q:
                return q[next(reversed(q))]
        return None

    def _unqueue(self, ticket: Ticket) -> None:
        del self._queues[ticket.priority][ticket._key]
        self.queued -= 1
        if self.queued == 0:
            self._empty_since = self._clock()

    def _start(self, ticket: Ticket, now: float) -> None:
        ticket.state = _IN_FLIGHT
        ticket.admitted_at = now
        self.in_flight += 1
        self.in_flight_prompt_tokens += ticket.prompt_tokens
        self.in_flight_kv_blocks += ticket.kv_blocks
        if self.footprint is not None and ticket.shape is not None:
            self.footprint.admitted(ticket.shape)
        wait = now - ticket.enqueued_at
        self.queue_wait.add(now, wait)
        self.queue_wait_hist.observe(wait)

    def _dispatch(self, now: float) -> None:
        while self.queued:
            head = self._head()
            assert head is not None
            if not self._fits(head.prompt_tokens, head.kv_blocks):
                return
            self._unqueue(head)
            self._start(head, now)
            if head._future is not None and not head._future.done():
                head._future.set_result(None)

    def _reject(self, ticket: Ticket, rejection: Rejected) -> Rejected:
        """Count a refusal at arrival and hand the exception back for raising."""
        ticket.state = _DONE
        ticket._result = rejection
        self.outcomes["rejected"] += 1
        self.rejections[rejection.reason] += 1
        return rejection

    def _finish(self, ticket: Ticket, rejection: Rejected) -> None:
        """End a queued request with a 429 (displaced, shed, queue_timeout) and wake its waiter."""
        ticket.state = _DONE
        ticket._result = rejection
        if rejection.reason in ("queue_timeout", "ttft_budget"):
            self.outcomes["timed_out"] += 1
        else:
            self.outcomes["rejected"] += 1
            self.rejections[rejection.reason] += 1
        if ticket._future is not None and not ticket._future.done():
            ticket._future.set_result(rejection)

    def _cancel(self, ticket: Ticket) -> None:
        """The waiting client went away: leave the queue, or free the slot just granted."""
        if ticket.state == _QUEUED:
            self._unqueue(ticket)
            ticket.state = _DONE
            self.outcomes["cancelled"] += 1
        elif ticket.state == _IN_FLIGHT:
            self._release(ticket, "cancelled")

    def _release(self, ticket: Ticket, outcome: str) -> None:
        if ticket.state != _IN_FLIGHT:
            return
        if outcome not in ("completed", "cancelled", "upstream_error"):
            raise ValueError(f"not an outcome of an admitted request: {outcome!r}")
        now = self._clock()
        ticket.state = _DONE
        self.in_flight -= 1
        self.in_flight_prompt_tokens -= ticket.prompt_tokens
        self.in_flight_kv_blocks -= ticket.kv_blocks
        self.outcomes[outcome] += 1
        self._drain.add(now)
        self._drain_blocks.add(now, ticket.kv_blocks)
        self._dispatch(now)
        if self.on_demand is not None:
            self.on_demand()

    def expire(self, now: float | None = None) -> int:
        """Time out the waiters queued longer than queue_timeout_s; how many went."""
        now = self._clock() if now is None else now
        timeout = self._limits.queue_timeout_s
        gone = 0
        for q in self._queues.values():
            while q:
                ticket = next(iter(q.values()))
                waited = now - ticket.enqueued_at
                if waited < timeout:
                    break
                self._unqueue(ticket)
                self.queue_wait.add(now, waited)
                self.queue_wait_hist.observe(waited)
                msg = f"queue timeout: waited {waited:.1f}s >= {timeout:g}s (queue_timeout_s)"
                self._finish(ticket, Rejected("queue_timeout", msg, self.retry_after_s(now)))
                gone += 1
        if self._limits.queue_policy != "fifo":
            gone += self._expire_budgets(now)
        if gone:
            self._dispatch(now)
        return gone

    def _expire_budgets(self, now: float) -> int:
        """deadline: take out the waiters whose TTFT budget is gone; codel/lifo: while the
        queue is congested, those queued longer than a short share of it."""
        short = self.congested(now) and self._limits.queue_policy in ("codel", "lifo")
        late: list[Ticket] = []
        for q in self._queues.values():
            for t in q.values():
                if t.deadline is None:
                    continue
                end = t.deadline
                if short:
                    end = min(end, t.enqueued_at + CODEL_SHORT * (t.deadline - t.enqueued_at))
                if now >= end:
                    late.append(t)
        for t in late:
            waited = now - t.enqueued_at
            self._unqueue(t)
            self.queue_wait.add(now, waited)
            self.queue_wait_hist.observe(waited)
            msg = (
                f"TTFT budget gone: waited {waited:.1f}s, no start in sight within"
                f" ttft_slo_s {self._limits.ttft_slo_s:g}s"
            )
            self._finish(t, Rejected("ttft_budget", msg, self.retry_after_s(now)))
        return len(late)

    # -- live changes --------------------------------------------------------------------------

    def set_limits(
        self, changes: Mapping[str, object], source: str = "admin", reason: str | None = None
    ) -> Limits:
        """Apply a change at once (LimitError names a bad field; nothing changes then).

        In auto mode, a change to a lever the autopilot moves (LEVERS) from anyone but the
        autopilot switches the mode to manual, and the event says so."""
        new = validate_limits(self._limits, changes)
        old = self._limits
        if source != AUTOPILOT and old.mode == "auto" and "mode" not in changes:
            moved = [f for f in LEVERS if f in changes and getattr(new, f) != getattr(old, f)]
            if moved:
                new = validate_limits(new, {"mode": "manual"})
                reason = reason or f"{', '.join(moved)} set by {source}: autopilot off (manual)"
        self._limits = new
        wall = self._wall()
        for field, value in new.to_dict().items():
            before = getattr(old, field)
            if value != before:
                event: dict[str, Any] = {
                    "time": wall,
                    "field": field,
                    "old": before,
                    "new": value,
                    "source": source,
                }
                if reason is not None:
                    event["reason"] = reason
                self.events.append(event)
        if new.rate_limit_rpm is None:
            self._rate = None
        elif self._rate is None:
            self._rate = TenantRateLimiter(new.rate_limit_rpm)
        else:
            self._rate.set_rpm(new.rate_limit_rpm)
        now = self._clock()
        self._shed(now)
        self._dispatch(now)
        return new

    def _shed(self, now: float) -> None:
        """Drop the newest, lowest-priority waiters until the queue fits max_queue."""
        limit = self._limits.max_queue
        for p in reversed(PRIORITIES):
            q = self._queues[p]
            while self.queued > limit and q:
                victim = q[next(reversed(q))]
                self._unqueue(victim)
                msg = f"shed: max_queue lowered to {limit} (max_queue)"
                self._finish(victim, Rejected("shed", msg, self.retry_after_s(now)))

    def set_paused(self, paused: bool, source: str = "admin") -> None:
        """Pause: admit nobody new (the queue holds, timeouts still run). Resume: dispatch."""
        if paused != self.paused:
            self.events.append(
                {
                    "time": self._wall(),
                    "field": "paused",
                    "old": self.paused,
                    "new": paused,
                    "source": source,
                }
            )
        self.paused = paused
        if not paused:
            self._dispatch(self._clock())

    # -- observation ---------------------------------------------------------------------------

    def record_ttft(self, seconds: float, queue_s: float | None = None) -> None:
        """A time to first token measured by the proxy (arrival to first upstream byte); with
        the time it queued, the engine's share updates the deadline queue's estimate."""
        self.ttft.add(self._clock(), seconds)
        self.ttft_hist.observe(seconds)
        if queue_s is not None:
            engine_s = max(0.0, seconds - queue_s)
            self.engine_ttft_s += ENGINE_TTFT_GAIN * (engine_s - self.engine_ttft_s)

    def queued_by_priority(self) -> dict[str, int]:
        return {p: len(q) for p, q in self._queues.items()}

    def queued_ages_s(self, now: float) -> list[float]:
        """Seconds each waiting request has waited, in the order of the queue (highest priority
        first, oldest first within one), the first QUEUED_AGES_LISTED; milliseconds kept. A
        what-if starting from now drains this backlog, and its ages decide which time out."""
        ages: list[float] = []
        for p in PRIORITIES:
            for t in self._queues[p].values():
                if len(ages) >= QUEUED_AGES_LISTED:
                    return ages
                ages.append(round(max(0.0, now - t.enqueued_at), 3))
        return ages

    def stats(self) -> dict[str, Any]:
        """The /admin/stats object, less the upstream (the app knows that)."""
        now = self._clock()
        w50, w95 = self.queue_wait.quantiles(now, (0.5, 0.95))
        t50, t95 = self.ttft.quantiles(now, (0.5, 0.95))
        return {
            "time": self._wall(),
            "in_flight": self.in_flight,
            "queued": self.queued,
            "queued_by_priority": self.queued_by_priority(),
            "queued_ages_s": self.queued_ages_s(now),
            "in_flight_prompt_tokens": self.in_flight_prompt_tokens,
            "offered": self.offered,
            "outcomes": dict(self.outcomes),
            "rejections": dict(self.rejections),
            "queue_wait_s": {"p50": w50, "p95": w95},
            "ttft_s": {"p50": t50, "p95": t95},
            "window_s": self.window_s,
            "paused": self.paused,
            "in_flight_kv_blocks": self.in_flight_kv_blocks,
            "share_slots": self.share_slots,
            "share_kv_blocks": self.share_kv_blocks,
            "engine_ttft_s": self.engine_ttft_s,
            "mode": self._limits.mode,
            "autopilot": self.autopilot,
            "limits": self._limits.to_dict(),
        }
