"""The budgets a request is admitted against: slots (max_concurrency), prompt tokens
(max_inflight_prompt_tokens), predicted KV blocks (max_inflight_kv_blocks), and this gateway's
share of limits held elsewhere (Redis grants, the live replicas' room).

`Budgets` counts what the admitted requests hold and `fits` is the one check of a new one. A
new budget (say, prompt tokens admitted but not yet prefilled, held from admission to the
request's first token): its limit in gateway.limits.Limits and core.base.admin_api.LIMITS, a
counter here taken in `take` and given back in `give` (or at the first token), one term in
`fits`, and its drain rate in gateway/estimates.py for the predicted wait.

Pure; the controller (gateway/admission.py) owns one and passes its limits in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from llmtop.gateway.limits import Limits


class Holder(Protocol):
    """What an admitted request holds (admission's Ticket)."""

    prompt_tokens: int
    kv_blocks: int


class Budgets:
    """What is in flight now, against the limits and this gateway's shares."""

    __slots__ = ("in_flight", "kv_blocks", "prompt_tokens", "share_kv_blocks", "share_slots")

    def __init__(self) -> None:
        self.in_flight = 0
        """Requests admitted and not yet ended."""
        self.prompt_tokens = 0
        """Their prompt tokens (counted when the prompt-token budget is on)."""
        self.kv_blocks = 0
        """Their predicted KV footprint, blocks."""
        self.share_slots: int | None = None
        self.share_kv_blocks: int | None = None
        """This gateway's share of limits held elsewhere (Redis grants, the live replicas'
        room): admission takes the smaller of these and the limits; None = no such cap."""

    def take(self, held: Holder) -> None:
        """A request is admitted."""
        self.in_flight += 1
        self.prompt_tokens += held.prompt_tokens
        self.kv_blocks += held.kv_blocks

    def give(self, held: Holder) -> None:
        """An admitted request ended."""
        self.in_flight -= 1
        self.prompt_tokens -= held.prompt_tokens
        self.kv_blocks -= held.kv_blocks

    def over(self, lim: Limits, ahead: Sequence[Holder], kv_blocks: int) -> tuple[int, int]:
        """How far a new request of `kv_blocks` and the waiters `ahead` of it are over the free
        room: (requests, KV blocks; 0 when the KV budget is off), for the predicted wait."""
        requests_over = len(ahead) + 1 - (lim.max_concurrency - self.in_flight)
        blocks_over = 0
        if lim.max_inflight_kv_blocks is not None:
            blocks = sum(t.kv_blocks for t in ahead) + kv_blocks
            blocks_over = blocks - (lim.max_inflight_kv_blocks - self.kv_blocks)
        return requests_over, blocks_over

    def fits(self, lim: Limits, prompt_tokens: int, kv_blocks: int) -> bool:
        """Whether one more request fits. A prompt larger than a whole budget is admitted
        alone, when nothing is in flight (a share smaller than the limit still holds it)."""
        if self.in_flight >= lim.max_concurrency:
            return False
        share = self.share_slots
        if share is not None and self.in_flight >= share:
            return False
        share_kv = self.share_kv_blocks
        if share_kv is not None and self.kv_blocks + kv_blocks > share_kv:
            whole = lim.max_inflight_kv_blocks
            if self.in_flight or whole is None or share_kv < whole:
                return False
        if self.in_flight == 0:
            return True
        budget = lim.max_inflight_prompt_tokens
        if budget is not None and self.prompt_tokens + prompt_tokens > budget:
            return False
        kv = lim.max_inflight_kv_blocks
        return kv is None or self.kv_blocks + kv_blocks <= kv
