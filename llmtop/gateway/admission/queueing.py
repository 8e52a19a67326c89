"""The gateway's waiting queue, pure: one FIFO per priority, and the `limits.queue_policy`s that
decide who goes next or leaves. fifo: a waiter leaves after queue_timeout_s. deadline: a TTFT budget
each (ttft_slo_s less the engine's TTFT), refused at arrival if its predicted start is past it, gone
when it is spent. codel (Fail at Scale): those budgets, no refusal; while congested (not empty for a
budget) a waiter leaves after CODEL_SHORT of it. lifo: codel, newest first then."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")
"""Highest first; the header x-llmtop-priority takes one of these."""
RANK = {p: i for i, p in enumerate(PRIORITIES)}
"""A priority's place in PRIORITIES: lower goes first."""
CODEL_SHORT = 0.25
"""codel/lifo: a congested queue's timeout, as a share of the TTFT budget."""


@dataclass(frozen=True)
class QueuePolicy:
    """What one value of `limits.queue_policy` changes in the queue."""

    name: str
    budgets: bool
    """Requests with a TTFT SLO carry a deadline and leave when it is gone."""
    refuses_late: bool
    """Refuse at arrival a request whose predicted start is past its budget."""
    short_when_congested: bool
    """While congested, a waiter leaves after CODEL_SHORT of its budget (codel)."""
    newest_first_when_congested: bool
    """While congested, the newest waiter goes first (adaptive LIFO)."""


POLICIES: dict[str, QueuePolicy] = {
    "fifo": QueuePolicy("fifo", False, False, False, False),
    "deadline": QueuePolicy("deadline", True, True, False, False),
    "codel": QueuePolicy("codel", True, False, True, False),
    "lifo": QueuePolicy("lifo", True, False, True, True),
}
"""The queue policies by name (limits.queue_policy takes one of these)."""


class Waiter(Protocol):
    """What the queue reads of a request (admission's Ticket)."""

    priority: str
    enqueued_at: float
    deadline: float | None
    kv_blocks: int
    seq: int


W = TypeVar("W", bound=Waiter)


class WaitQueue(Generic[W]):
    """The requests waiting for room: per priority, in arrival order; `count` of them."""

    __slots__ = ("_by_priority", "_clock", "_seq", "count", "empty_since")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._by_priority: dict[str, OrderedDict[int, W]] = {p: OrderedDict() for p in PRIORITIES}
        self._clock = clock
        self._seq = 0
        self.count = 0
        self.empty_since = clock()
        """When the queue last became empty (codel's congestion test starts from it)."""

    def push(self, waiter: W) -> None:
        """Join the back of the waiter's priority."""
        waiter.seq = self._seq
        self._seq += 1
        self._by_priority[waiter.priority][waiter.seq] = waiter
        self.count += 1

    def remove(self, waiter: W) -> None:
        """Take a waiter out (admitted, timed out, shed, gone)."""
        del self._by_priority[waiter.priority][waiter.seq]
        self.count -= 1
        if self.count == 0:
            self.empty_since = self._clock()

    @property
    def next_seq(self) -> int:
        """The seq the next waiter will get: every waiter below it came before."""
        return self._seq

    def waits_before(self, rank: int, seq_mark: int) -> bool:
        """Whether a waiter of rank `rank` or higher that joined before `seq_mark` still
        waits (the oldest of each priority is its first)."""
        for p in PRIORITIES[: rank + 1]:
            q = self._by_priority[p]
            if q and next(iter(q)) < seq_mark:
                return True
        return False

    def __iter__(self) -> Iterator[W]:
        """The waiters in the order of the queue: highest priority first, oldest first."""
        for q in self._by_priority.values():
            yield from q.values()

    def head(self, policy: QueuePolicy, congested: Callable[[], bool]) -> W | None:
        """Who goes next: the oldest of the highest priority (the newest, under lifo while
        `congested()`)."""
        newest = policy.newest_first_when_congested and congested()
        for q in self._by_priority.values():
            if q:
                return q[next(reversed(q))] if newest else next(iter(q.values()))
        return None

    def ahead_of(self, priority: str) -> list[W]:
        """The waiters that go before a new request of `priority` (same or higher)."""
        return [w for p in PRIORITIES[: RANK[priority] + 1] for w in self._by_priority[p].values()]

    def newest_below(self, priority: str | None) -> W | None:
        """The newest waiter of the lowest priority strictly below `priority` (any priority
        when None): the one displaced by a more urgent arrival, or shed."""
        for p in reversed(PRIORITIES):
            if priority is not None and RANK[p] <= RANK[priority]:
                return None
            q = self._by_priority[p]
            if q:
                return q[next(reversed(q))]
        return None

    def waited_past(self, now: float, timeout_s: float) -> list[W]:
        """The waiters queued for `timeout_s` or longer, in the order of the queue."""
        out: list[W] = []
        for q in self._by_priority.values():
            for w in q.values():
                if now - w.enqueued_at < timeout_s:
                    break
                out.append(w)
        return out

    def out_of_budget(self, now: float, short: bool) -> list[W]:
        """The waiters whose TTFT budget is gone; with `short` (codel while congested), those
        queued longer than CODEL_SHORT of it."""
        late: list[W] = []
        for w in self:
            if w.deadline is None:
                continue
            end = w.deadline
            if short:
                end = min(end, w.enqueued_at + CODEL_SHORT * (w.deadline - w.enqueued_at))
            if now >= end:
                late.append(w)
        return late

    def by_priority(self) -> dict[str, int]:
        """How many wait at each priority."""
        return {p: len(q) for p, q in self._by_priority.items()}

    def ages(self, now: float, most: int) -> list[float]:
        """Seconds each waiter has waited, in the order of the queue, the first `most`;
        milliseconds kept."""
        ages: list[float] = []
        for w in self:
            if len(ages) >= most:
                return ages
            ages.append(round(max(0.0, now - w.enqueued_at), 3))
        return ages

    def kv_blocks(self) -> int:
        """The predicted KV footprint of every waiter, summed."""
        return sum(w.kv_blocks for w in self)
