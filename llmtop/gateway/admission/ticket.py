"""One request's place in admission: queued, then in flight, then done, and what its handler
awaits. The controller (controller.py) moves it from state to state; the handler waits
on it and ends it, exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from llmtop.errors import Rejected
from llmtop.gateway.admission.footprint import PromptShape

QUEUED, IN_FLIGHT, DONE = 0, 1, 2
"""A ticket's states, in the only order it goes through them (queued may be skipped)."""


class Owner(Protocol):
    """The controller a ticket belongs to: what ends it."""

    def cancel(self, ticket: Ticket) -> None: ...

    def release(self, ticket: Ticket, outcome: str) -> None: ...

    def prefilled(self, ticket: Ticket) -> None: ...


class Ticket:
    """One request's place: queued, then in flight, then done; `release` ends it exactly once."""

    __slots__ = (
        "_clock",
        "_future",
        "_owner",
        "_result",
        "admitted_at",
        "deadline",
        "enqueued_at",
        "expected_out",
        "first_token_at",
        "kv_blocks",
        "prefill_due",
        "prefilling",
        "priority",
        "prompt_tokens",
        "seq",
        "shape",
        "state",
        "tenant",
    )

    def __init__(
        self,
        owner: Owner,
        clock: Callable[[], float],
        priority: str,
        prompt_tokens: int,
        kv_blocks: int,
        tenant: str | None,
        shape: PromptShape | None,
        now: float,
    ) -> None:
        self._owner = owner
        self._clock = clock
        self.priority = priority
        self.prompt_tokens = prompt_tokens
        self.kv_blocks = kv_blocks
        """Its predicted KV footprint (footprint.py)."""
        self.tenant = tenant
        self.shape = shape
        self.enqueued_at = now
        self.admitted_at: float | None = None
        self.state = QUEUED
        self.first_token_at: float | None = None
        """When its first token came (streamed answers only)."""
        self.prefilling = False
        """Admitted and no first token yet: its prompt counts in the prefill backlog."""
        self.prefill_due: float | None = None
        """For a request whose first byte is its whole answer (not streamed): when its
        prefill is predicted done, the time its prompt leaves the backlog."""
        self.deadline: float | None = None
        """When its TTFT budget is gone (queue policies but fifo, with a TTFT SLO)."""
        self.seq = 0
        """Its place in the order of arrival, set when it joins the queue."""
        self.expected_out = 0
        """Output tokens it is expected to make (the footprint model's; 0: unknown): its
        predicted life in flight (lifetimes.py)."""
        self._future: asyncio.Future[Rejected | None] | None = None
        self._result: Rejected | None = None

    @property
    def admitted(self) -> bool:
        return self.state == IN_FLIGHT or (self.state == DONE and self.admitted_at is not None)

    @property
    def queued(self) -> bool:
        return self.state == QUEUED

    @property
    def in_flight(self) -> bool:
        return self.state == IN_FLIGHT

    @property
    def queue_wait_s(self) -> float:
        """Seconds spent queued (0 when admitted at once)."""
        end = self.admitted_at if self.admitted_at is not None else self._clock()
        return end - self.enqueued_at

    async def wait(self) -> None:
        """Return once admitted; raise Rejected (timed out, displaced, shed). Cancelling the
        waiting task takes the request out of the queue (or frees its slot) as `cancelled`."""
        if self.state == IN_FLIGHT:
            return
        if self.state == DONE:
            if self._result is not None:
                raise self._result
            return
        assert self._future is not None
        try:
            result = await self._future
        except asyncio.CancelledError:
            self._owner.cancel(self)
            raise
        if result is not None:
            raise result

    def cancel(self) -> None:
        """The client is gone: leave the queue or free the slot, as `cancelled`. Idempotent;
        a no-op once the request has ended."""
        self._owner.cancel(self)

    def release(self, outcome: str = "completed") -> None:
        """End an admitted request: completed, cancelled or upstream_error. Idempotent."""
        self._owner.release(self, outcome)

    def first_token(self) -> None:
        """Its first token arrived: its prompt is prefilled. Idempotent."""
        if self.first_token_at is None:
            self.first_token_at = self._clock()
        if self.prefilling:
            self._owner.prefilled(self)

    # -- moved by the controller ---------------------------------------------------------------

    def to_wait(self) -> None:
        """It waits in the queue: `wait` now blocks until it is admitted or refused."""
        self._future = asyncio.get_running_loop().create_future()

    def admit(self, now: float) -> None:
        """In flight from `now`; wakes its waiter."""
        self.state = IN_FLIGHT
        self.prefilling = True
        self.admitted_at = now
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def refuse(self, rejection: Rejected) -> None:
        """Ended with a 429 (at arrival, or out of the queue); wakes its waiter to raise it."""
        self.state = DONE
        self._result = rejection
        if self._future is not None and not self._future.done():
            self._future.set_result(rejection)

    def end(self) -> None:
        """Ended without a 429 (released, or cancelled while queued)."""
        self.state = DONE
