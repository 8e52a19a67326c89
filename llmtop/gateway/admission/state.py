"""What the admission controller holds, and every read of it: the limits, queue, budgets in flight,
estimates, counters and recent figures, and what admission predicts from them (a 429's Retry-After,
a newcomer's predicted start, the limit that holds the queue). Read-only and pure: the decisions
that change it are the controller's, which builds on this class, so each file keeps to one side."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from llmtop.gateway.admission.budgets import Budgets
from llmtop.gateway.admission.estimates import Estimates
from llmtop.gateway.admission.footprint import FootprintModel
from llmtop.gateway.admission.lifetimes import newcomers_fit
from llmtop.gateway.admission.limits import Limits, validate_limits
from llmtop.gateway.admission.queueing import POLICIES, WaitQueue
from llmtop.gateway.admission.ratelimit import TenantRateLimiter
from llmtop.gateway.admission.refusals import RefusalLedger
from llmtop.gateway.admission.stats import stats_doc
from llmtop.gateway.admission.ticket import Ticket
from llmtop.gateway.admission.window import CumulativeHistogram, SampleWindow

OUTCOMES: tuple[str, ...] = ("completed", "rejected", "timed_out", "cancelled", "upstream_error")
REJECT_REASONS: tuple[str, ...] = ("queue_full", "displaced", "shed", "rate_limited", "ttft_budget")
QUEUED_AGES_LISTED = 1000
"""/admin/stats lists the ages of at most this many waiting requests (the head of the queue)."""


class AdmissionState:
    """The gateway's admission state and its reads; AdmissionController adds the decisions."""

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
        self._queue: WaitQueue[Ticket] = WaitQueue(clock)
        self._budgets = Budgets()
        self._held: set[Ticket] = set()
        """The admitted requests not yet ended: whose ends a newcomer's start waits on."""
        self._held_version = 0
        """Bumped whenever `_held` changes (the predicted ends are cached on it)."""
        self._due: list[Ticket] = []
        """Admitted unstreamed requests whose prefill end is predicted (Ticket.prefill_due)."""
        self.estimates = Estimates()
        """The drain rates and the engine-side TTFT admission predicts from."""
        self.refusals = RefusalLedger()
        """The 429s given at arrival for their predicted start, against the slots that came."""
        self.offered = 0
        self.paused = False
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.rejections = dict.fromkeys(REJECT_REASONS, 0)
        self._rate = (
            TenantRateLimiter(limits.rate_limit_rpm) if limits.rate_limit_rpm is not None else None
        )
        self.footprint: FootprintModel | None = None
        """Set by the owner when KV-footprint admission is used; learns from admissions."""
        self.tenant_ttft_slo_s: dict[str, float] = {}
        """Per-tenant TTFT budgets (the gateway's config): overrides of limits.ttft_slo_s for
        admission only."""
        self.autopilot: dict[str, Any] | None = None
        """The autopilot's last state for /admin/stats (budget, reason), set by its driver."""
        self.engine_room_tokens = 0
        """Prompt tokens the engine can start at once past the KV budget (the autopilot sets it
        each scrape from the blocks the engine reports free, 0 while the engine queues or misses
        its SLO): a request only the KV budget holds goes in, as vLLM would start it."""
        self.over_budget_admitted = 0
        """Requests admitted into the engine's free room past the KV budget."""
        self.on_demand: Callable[[], None] | None = None
        """Called when a request waits for room or one ends, so a shared-limits driver can
        ask for more room or give some back (gateway/upstreams/shared.py)."""
        self.queue_wait = SampleWindow(window_s)
        self.ttft = SampleWindow(window_s)
        self.queue_wait_hist = CumulativeHistogram()
        self.ttft_hist = CumulativeHistogram()
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)

    @property
    def limits(self) -> Limits:
        return self._limits

    def now(self) -> float:
        """The controller's clock (monotonic; a fake one in tests and virtual time)."""
        return self._clock()

    def wall(self) -> float:
        """Wall-clock time, for what people read (events, /admin/stats' time)."""
        return self._wall()

    @property
    def queued(self) -> int:
        """Requests waiting in the queue."""
        return self._queue.count

    @property
    def in_flight(self) -> int:
        """Requests admitted and not yet ended."""
        return self._budgets.in_flight

    @property
    def in_flight_prompt_tokens(self) -> int:
        return self._budgets.prompt_tokens

    @property
    def in_flight_kv_blocks(self) -> int:
        return self._budgets.kv_blocks

    @property
    def unprefilled_tokens(self) -> int:
        """Prompt tokens admitted and not yet prefilled (no first token yet)."""
        return self._budgets.unprefilled_tokens

    @property
    def share_slots(self) -> int | None:
        """This gateway's share of the slots held elsewhere (see `set_share`); None: none."""
        return self._budgets.share_slots

    @property
    def share_kv_blocks(self) -> int | None:
        """This gateway's share of the KV blocks held elsewhere; None: no such cap."""
        return self._budgets.share_kv_blocks

    @property
    def engine_ttft_s(self) -> float:
        """Recent engine-side TTFT (arrival at the engine to first byte), smoothed."""
        return self.estimates.engine_ttft_s

    # -- what admission predicts (estimates.py) ----------------------------------------

    def retry_after_s(self, now: float | None = None) -> float:
        """Seconds until the current backlog has drained at the recent completion rate."""
        now = self._clock() if now is None else now
        return self.estimates.retry_after_s(
            now, self._queue.count + 1, self._limits.queue_timeout_s
        )

    def drain_rate(self) -> float | None:
        """Requests finished per second lately (None before the first)."""
        return self.estimates.drain_rate(self._clock())

    def good_per_s(self) -> float:
        """Requests served with their first token within ttft_slo_s, per second lately."""
        return self.estimates.good_per_s(self._clock())

    def queue_budget_s(self, slo_s: float) -> float:
        """Seconds a request may wait in the queue and still meet a TTFT of `slo_s`."""
        return self.estimates.queue_budget_s(slo_s)

    def predict_wait_s(
        self, priority: str, kv_blocks: int, now: float, prompt_tokens: int = 0
    ) -> float | None:
        """When a request arriving now would start: the requests and KV blocks ahead of it
        (same or higher priority) beyond what the limits have free, at the predicted ends of
        those in flight (lifetimes.py), and the prompt tokens over the prefill budget at the
        measured prefill rate. None when a figure it needs is unknown (no life measured yet,
        no prefill rate): the request then waits rather than being refused on a guess."""
        ahead = self._queue.ahead_of(priority)
        requests, blocks, tokens = self._budgets.over(self._limits, ahead, prompt_tokens, kv_blocks)
        est = self.estimates
        room = est.lifetimes.wait_s(now, self._held, self._held_version, requests, blocks)
        prefill = est.prefill_wait_s(tokens)
        if room is None or prefill is None:
            return None
        return max(room, prefill)

    def peak_share(self, block_size: int, per_token_s: float | None = None) -> float | None:
        """The most KV the requests in flight will hold together, as a share of their summed
        footprint (lifetimes.py); `per_token_s` before a life was measured (None: unknown)."""
        lives = self.estimates.lifetimes
        return lives.peak_share(self._clock(), self._held, block_size, per_token_s)

    def newcomers_fit(
        self,
        block_size: int,
        limit_blocks: float,
        held_blocks: float,
        per_token_s: float | None = None,
        most: int = 1024,
        free_blocks: float | None = None,
    ) -> int | None:
        """How many more requests of the mix in flight could start now and keep the predicted
        peak KV of all within `limit_blocks`, the trajectories moved to the engine's measured
        hold `held_blocks`, their prompts within `free_blocks` (lifetimes.newcomers_fit); None
        before a life or an ITL is known."""
        per = self.estimates.lifetimes.per_token_s() or per_token_s
        if per is None:
            return None
        return newcomers_fit(
            self._clock(), self._held, block_size, per, limit_blocks, held_blocks, most, free_blocks
        )

    def largest_in_flight_kv_blocks(self) -> int:
        """The largest predicted footprint among the requests in flight (0: none)."""
        return max((t.kv_blocks for t in self._held), default=0)

    def prefill_tok_per_s(self) -> float | None:
        """The engine's measured prefill rate (estimates.py: PrefillRate); None: not
        measured yet."""
        return self.estimates.prefill.rate()

    def binding(self) -> str | None:
        """The limit that holds the head of the queue now (None: nobody waits, or paused)."""
        queue = self._queue
        if not queue.count or self.paused:
            return None
        head = queue.head(POLICIES[self._limits.queue_policy], self._congested_now)
        if head is None:
            return None
        return self._budgets.binding(self._limits, head.prompt_tokens, head.kv_blocks)

    def congested(self, now: float) -> bool:
        """codel's test: the queue has not been empty for a whole TTFT budget."""
        slo = self._limits.ttft_slo_s
        interval = self.queue_budget_s(slo) if slo is not None else self._limits.queue_timeout_s
        return self._queue.count > 0 and now - self._queue.empty_since > interval

    def _congested_now(self) -> bool:
        return self.congested(self._clock())

    # -- room: the budgets and this gateway's share (budgets.py) -----------------------

    def demand(self) -> tuple[int, int]:
        """Slots and KV blocks this gateway would use now: in flight plus queued."""
        held = self._budgets
        return held.in_flight + self._queue.count, held.kv_blocks + self._queue.kv_blocks()

    def _fits(self, prompt_tokens: int, kv_blocks: int) -> bool:
        if self.paused:
            return False
        held = self._budgets.binding(self._limits, prompt_tokens, kv_blocks)
        return held is None or (
            held == "max_inflight_kv_blocks" and 0 < prompt_tokens <= self.engine_room_tokens
        )

    # -- observation ---------------------------------------------------------------------------

    def queued_by_priority(self) -> dict[str, int]:
        return self._queue.by_priority()

    def queued_ages_s(self, now: float) -> list[float]:
        """Seconds each waiting request has waited, in the order of the queue (highest priority
        first, oldest first within one), the first QUEUED_AGES_LISTED; milliseconds kept. A
        what-if starting from now drains this backlog, and its ages decide which time out."""
        return self._queue.ages(now, QUEUED_AGES_LISTED)

    def stats(self) -> dict[str, Any]:
        """The /admin/stats object, less the upstream (stats.py)."""
        return stats_doc(self)
