"""The budgets a request is admitted against: slots (max_concurrency), prompt tokens in flight
(max_inflight_prompt_tokens) and not yet prefilled (max_unprefilled_prompt_tokens, held until the
first token), predicted KV blocks (max_inflight_kv_blocks), and this gateway's share of limits held
elsewhere (Redis grants, the replicas' room). Pure: `Budgets` counts what the admitted hold, and
`binding` is the one check of a new one: the limit that keeps it out, or None when it fits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from llmtop.gateway.admission.limits import Limits


class Holder(Protocol):
    """What an admitted request holds (admission's Ticket)."""

    prompt_tokens: int
    kv_blocks: int
    prefilling: bool
    """Admitted, no first token yet: its prompt is still the engine's to prefill."""


class Budgets:
    """What is in flight now, against the limits and this gateway's shares."""

    __slots__ = (
        "in_flight",
        "kv_blocks",
        "prompt_tokens",
        "share_kv_blocks",
        "share_slots",
        "unprefilled_tokens",
    )

    def __init__(self) -> None:
        self.in_flight = 0
        """Requests admitted and not yet ended."""
        self.prompt_tokens = 0
        """Their prompt tokens (counted when the prompt-token budget is on)."""
        self.kv_blocks = 0
        """Their predicted KV footprint, blocks."""
        self.unprefilled_tokens = 0
        """The prompt tokens of those without a first token yet: the engine's prefill backlog
        from this gateway, counted here request by request (no scrape lag)."""
        self.share_slots: int | None = None
        self.share_kv_blocks: int | None = None
        """This gateway's share of limits held elsewhere (Redis grants, the live replicas'
        room): admission takes the smaller of these and the limits; None = no such cap."""

    def take(self, held: Holder) -> None:
        """A request is admitted."""
        self.in_flight += 1
        self.prompt_tokens += held.prompt_tokens
        self.unprefilled_tokens += held.prompt_tokens
        self.kv_blocks += held.kv_blocks

    def prefilled(self, held: Holder) -> None:
        """An admitted request's first token: its prompt is no longer the engine's backlog."""
        self.unprefilled_tokens -= held.prompt_tokens

    def give(self, held: Holder) -> None:
        """An admitted request ended (`held.prefilling`: before its first token)."""
        self.in_flight -= 1
        self.prompt_tokens -= held.prompt_tokens
        if held.prefilling:
            self.unprefilled_tokens -= held.prompt_tokens
        self.kv_blocks -= held.kv_blocks

    def over(
        self, lim: Limits, ahead: Sequence[Holder], prompt_tokens: int, kv_blocks: int
    ) -> tuple[int, int, int]:
        """How far a new request and the waiters `ahead` of it are over the free room:
        (requests, KV blocks, prompt tokens to prefill; 0 where that budget is off), for the
        predicted wait."""
        requests_over = len(ahead) + 1 - (lim.max_concurrency - self.in_flight)
        blocks_over = tokens_over = 0
        if lim.max_inflight_kv_blocks is not None:
            blocks = sum(t.kv_blocks for t in ahead) + kv_blocks
            blocks_over = blocks - (lim.max_inflight_kv_blocks - self.kv_blocks)
        if lim.max_unprefilled_prompt_tokens is not None:
            before = sum(t.prompt_tokens for t in ahead) + self.unprefilled_tokens
            # a prompt larger than the budget goes once nothing is left to prefill (`binding`)
            need = before + prompt_tokens - lim.max_unprefilled_prompt_tokens
            tokens_over = min(before, need)
        return requests_over, blocks_over, tokens_over

    def binding(self, lim: Limits, prompt_tokens: int, kv_blocks: int) -> str | None:
        """The limit that keeps one more request out (its field name; "share_slots" and
        "share_kv_blocks" for this gateway's share), or None when it fits. A prompt larger than
        a whole budget is admitted alone: when nothing is in flight (a share smaller than the
        limit still holds it), or, for the prefill budget, when nothing is left to prefill."""
        if self.in_flight >= lim.max_concurrency:
            return "max_concurrency"
        share = self.share_slots
        if share is not None and self.in_flight >= share:
            return "share_slots"
        share_kv = self.share_kv_blocks
        if share_kv is not None and self.kv_blocks + kv_blocks > share_kv:
            whole = lim.max_inflight_kv_blocks
            if self.in_flight or whole is None or share_kv < whole:
                return "share_kv_blocks"
        if self.in_flight == 0:
            return None
        budget = lim.max_inflight_prompt_tokens
        if budget is not None and self.prompt_tokens + prompt_tokens > budget:
            return "max_inflight_prompt_tokens"
        backlog = self.unprefilled_tokens
        pre = lim.max_unprefilled_prompt_tokens
        if pre is not None and backlog and backlog + prompt_tokens > pre:
            return "max_unprefilled_prompt_tokens"
        kv = lim.max_inflight_kv_blocks
        if kv is not None and self.kv_blocks + kv_blocks > kv:
            return "max_inflight_kv_blocks"
        return None

    def fits(self, lim: Limits, prompt_tokens: int, kv_blocks: int) -> bool:
        """Whether one more request fits (`binding` is None)."""
        return self.binding(lim, prompt_tokens, kv_blocks) is None
