"""Admission control: at most `max_concurrency` requests at the engine, the rest in a bounded,
prioritised queue (seen, timed out, shed, changed live); pure asyncio on an injected clock, whose
timeouts fire when the owner calls `expire()`. Each `enter` ends in one outcome: offered ==
sum(outcomes) + in_flight + queued. The head (highest priority, then oldest) goes first and nobody
jumps one the budgets do not fit (no long prompt starves); one over a whole budget goes in alone."""

from __future__ import annotations

from collections.abc import Mapping

from llmtop.errors import Rejected
from llmtop.gateway.admission.footprint import PromptShape
from llmtop.gateway.admission.limits import (
    AUTOPILOT,
    LEVERS,
    LimitError,
    Limits,
    change_limits,
    limit_events,
    pause_event,
    validate_limits,
)
from llmtop.gateway.admission.queueing import POLICIES, PRIORITIES, RANK
from llmtop.gateway.admission.ratelimit import TenantRateLimiter
from llmtop.gateway.admission.refusals import Refusal
from llmtop.gateway.admission.state import OUTCOMES, REJECT_REASONS, AdmissionState
from llmtop.gateway.admission.ticket import IN_FLIGHT, QUEUED, Ticket

__all__ = [
    "AUTOPILOT",
    "LEVERS",
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


class AdmissionController(AdmissionState):
    """The gateway's admission decisions: enter, dispatch, release, expire, change live; what
    they hold and read is AdmissionState (state.py)."""

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
        if priority not in RANK:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        now = self._clock()
        self.offered += 1
        ticket = Ticket(self, self._clock, priority, prompt_tokens, kv_blocks, tenant, shape, now)
        if self.footprint is not None and shape is not None:
            ticket.expected_out = self.footprint.expected_output(shape.max_tokens)
        lim = self._limits
        if self._rate is not None and not rate_checked:
            wait_s = self._rate.check(tenant or "", now)
            if wait_s > 0:
                msg = f"rate limited: over {lim.rate_limit_rpm:g} requests/min (rate_limit_rpm)"
                raise self._reject(ticket, Rejected("rate_limited", msg, wait_s))
        queue = self._queue
        if queue.count == 0 and self._fits(prompt_tokens, kv_blocks):
            self._start(ticket, now)
            return ticket
        slo, source = ttft_slo_s, "the request's"
        if slo is None:  # a tenant's own budget overrides the limit, for admission only
            slo = self.tenant_ttft_slo_s.get(tenant or "", lim.ttft_slo_s)
            over = (tenant or "") in self.tenant_ttft_slo_s
            source = f"tenant {tenant}'s tenant_ttft_slo_s" if over else "ttft_slo_s"
        policy = POLICIES[lim.queue_policy]
        if slo is not None and policy.budgets:
            budget = self.queue_budget_s(slo)
            ticket.deadline = now + budget
            wait = self.predict_wait_s(priority, kv_blocks, now, prompt_tokens)
            if policy.refuses_late and wait is not None and wait > budget:
                mark = queue.next_seq
                self.refusals.refused(
                    Refusal(now, wait, budget, RANK[priority], mark, prompt_tokens, kv_blocks)
                )
                msg = (
                    f"over the TTFT budget: predicted start in {wait:.1f}s, budget {budget:.1f}s"
                    f" of {slo:g}s ({source}); capacity expected in {wait - budget:.1f}s"
                )
                raise self._reject(ticket, Rejected("ttft_budget", msg, wait - budget))
        if queue.count >= lim.max_queue:
            victim = queue.newest_below(priority)
            if victim is None:
                msg = f"queue full: {queue.count}/{lim.max_queue} waiting (max_queue)"
                raise self._reject(ticket, Rejected("queue_full", msg, self.retry_after_s(now)))
            msg = (
                f"displaced by a {priority}-priority request: queue full "
                f"{queue.count}/{lim.max_queue} waiting (max_queue)"
            )
            queue.remove(victim)
            self._finish(victim, Rejected("displaced", msg, self.retry_after_s(now)))
        ticket.to_wait()
        queue.push(ticket)
        self._dispatch(now)
        if ticket.queued and self.on_demand is not None:
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

    # -- room: the budgets and this gateway's share (budgets.py) -----------------------

    def set_engine_room(self, tokens: int) -> None:
        """The prompt tokens the engine can start at once past the KV budget (0: none);
        admits the queue's head into it."""
        self.engine_room_tokens = max(0, tokens)
        if tokens > 0:
            self._dispatch(self._clock())

    def set_share(self, slots: int | None, kv_blocks: int | None) -> None:
        """This gateway's share of the limits (see `share_slots`); admits the queue into it."""
        self._budgets.share_slots, self._budgets.share_kv_blocks = slots, kv_blocks
        self._dispatch(self._clock())

    # -- the queue (queueing.py) -------------------------------------------------------

    def _start(self, ticket: Ticket, now: float) -> None:
        budgets = self._budgets
        past = self.engine_room_tokens and budgets.binding(
            self._limits, ticket.prompt_tokens, ticket.kv_blocks
        )
        if past:  # only when a room is open: nothing added to the common admission
            self.engine_room_tokens = 0  # one past the KV budget a scrape: the next tells
            self.over_budget_admitted += 1
        self.estimates.prefill.pass_time(now, budgets.unprefilled_tokens)
        ticket.admit(now)
        budgets.take(ticket)
        self._held.add(ticket)
        self._held_version += 1
        if ticket.shape is not None and not ticket.shape.stream:
            # its first byte is its whole answer: the prompt leaves the backlog when its
            # prefill is predicted done (the backlog at the prefill rate; 1 s before a rate)
            rate = self.estimates.prefill.rate()
            ticket.prefill_due = now + (budgets.unprefilled_tokens / rate if rate else 1.0)
            self._due.append(ticket)
        if self.footprint is not None and ticket.shape is not None:
            self.footprint.admitted(ticket.shape)
        wait = now - ticket.enqueued_at
        self.queue_wait.add(now, wait)
        self.queue_wait_hist.observe(wait)

    def _dispatch(self, now: float) -> None:
        queue = self._queue
        policy, congested = POLICIES[self._limits.queue_policy], self._congested_now
        while queue.count:
            head = queue.head(policy, congested)
            assert head is not None
            if not self._fits(head.prompt_tokens, head.kv_blocks):
                break
            queue.remove(head)
            self._start(head, now)
        if self.refusals.watching:
            self.refusals.settle(now, queue.waits_before, self._fits)

    def _reject(self, ticket: Ticket, rejection: Rejected) -> Rejected:
        """Count a refusal at arrival and hand the exception back for raising."""
        ticket.refuse(rejection)
        self.outcomes["rejected"] += 1
        self.rejections[rejection.reason] += 1
        return rejection

    def _finish(self, ticket: Ticket, rejection: Rejected) -> None:
        """End a queued request with a 429 (displaced, shed, queue_timeout) and wake its waiter."""
        if rejection.reason in ("queue_timeout", "ttft_budget"):
            self.outcomes["timed_out"] += 1
        else:
            self.outcomes["rejected"] += 1
            self.rejections[rejection.reason] += 1
        ticket.refuse(rejection)

    # -- endings (what Ticket.cancel and Ticket.release call) ----------------------------------

    def cancel(self, ticket: Ticket) -> None:
        """The waiting client went away: leave the queue, or free the slot just granted."""
        if ticket.state == QUEUED:
            self._queue.remove(ticket)
            ticket.end()
            self.outcomes["cancelled"] += 1
        elif ticket.state == IN_FLIGHT:
            self.release(ticket, "cancelled")

    def prefilled(self, ticket: Ticket) -> None:
        """An admitted request's first token: its prompt leaves the prefill backlog, counted
        into the prefill rate; room for the next prompt."""
        if ticket.state != IN_FLIGHT or not ticket.prefilling:
            return
        now = self._clock()
        self.estimates.prefill.pass_time(now, self._budgets.unprefilled_tokens)
        self._budgets.prefilled(ticket)
        ticket.prefilling = False
        self.estimates.prefill.prefilled(ticket.prompt_tokens)
        self._dispatch(now)

    def release(self, ticket: Ticket, outcome: str = "completed") -> None:
        """End an admitted request: completed, cancelled or upstream_error. Idempotent."""
        if ticket.state != IN_FLIGHT:
            return
        if outcome not in ("completed", "cancelled", "upstream_error"):
            raise ValueError(f"not an outcome of an admitted request: {outcome!r}")
        now = self._clock()
        if ticket.prefilling:
            self.estimates.prefill.pass_time(now, self._budgets.unprefilled_tokens)
        ticket.end()
        self._budgets.give(ticket)
        self._held.discard(ticket)
        self._held_version += 1
        ticket.prefilling = False
        self.outcomes[outcome] += 1
        admitted = ticket.admitted_at
        life = now - admitted if outcome == "completed" and admitted is not None else None
        self.estimates.finished(now, ticket.kv_blocks, life, ticket.expected_out)
        slo, first = self._limits.ttft_slo_s, ticket.first_token_at
        to_first = None if first is None else first - ticket.enqueued_at
        if outcome == "completed" and slo is not None and to_first is not None and to_first <= slo:
            self.estimates.served_within_slo(now)
        self._dispatch(now)
        if self.on_demand is not None:
            self.on_demand()

    def expire(self, now: float | None = None) -> int:
        """Time out the waiters queued longer than queue_timeout_s, and (every policy but
        fifo) those whose TTFT budget is gone; how many went."""
        now = self._clock() if now is None else now
        if self._due:
            self._prefills_due(now)
        timeout = self._limits.queue_timeout_s
        gone = 0
        for ticket in self._queue.waited_past(now, timeout):
            waited = self._time_out(ticket, now)
            msg = f"queue timeout: waited {waited:.1f}s >= {timeout:g}s (queue_timeout_s)"
            self._finish(ticket, Rejected("queue_timeout", msg, self.retry_after_s(now)))
            gone += 1
        policy = POLICIES[self._limits.queue_policy]
        if policy.budgets:
            short = self.congested(now) and policy.short_when_congested
            late = self._queue.out_of_budget(now, short)
            for ticket in late:
                waited = self._time_out(ticket, now)
                msg = (
                    f"TTFT budget gone: waited {waited:.1f}s, no start in sight within"
                    f" ttft_slo_s {self._limits.ttft_slo_s:g}s"
                )
                self._finish(ticket, Rejected("ttft_budget", msg, self.retry_after_s(now)))
            gone += len(late)
        if gone:
            self._dispatch(now)
        return gone

    def _prefills_due(self, now: float) -> None:
        """Unstreamed requests whose prefill is predicted done leave the backlog."""
        due = [t for t in self._due if t.prefill_due is not None and t.prefill_due <= now]
        if not due:
            return
        self._due = [t for t in self._due if t.prefilling and t not in due]
        for ticket in due:
            self.prefilled(ticket)

    def _time_out(self, ticket: Ticket, now: float) -> float:
        """Take a waiter out of the queue for its time; the seconds it waited."""
        waited = now - ticket.enqueued_at
        self._queue.remove(ticket)
        self.queue_wait.add(now, waited)
        self.queue_wait_hist.observe(waited)
        return waited

    # -- live changes --------------------------------------------------------------------------

    def set_limits(
        self, changes: Mapping[str, object], source: str = "admin", reason: str | None = None
    ) -> Limits:
        """Apply a change at once (LimitError names a bad field; nothing changes then); in auto
        mode, a lever moved by anyone but the autopilot switches it off (`change_limits`)."""
        old = self._limits
        new, reason = change_limits(old, changes, source, reason)
        self._limits = new
        self.events.extend(limit_events(old, new, source, reason, self._wall()))
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
        while self._queue.count > limit:
            victim = self._queue.newest_below(None)
            assert victim is not None
            self._queue.remove(victim)
            msg = f"shed: max_queue lowered to {limit} (max_queue)"
            self._finish(victim, Rejected("shed", msg, self.retry_after_s(now)))

    def set_paused(self, paused: bool, source: str = "admin") -> None:
        """Pause: admit nobody new (the queue holds, timeouts still run). Resume: dispatch."""
        if paused != self.paused:
            self.events.append(pause_event(self.paused, paused, source, self._wall()))
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
            self.estimates.first_token(seconds, queue_s)
