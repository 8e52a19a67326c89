"""10,000 queued requests at the admission level, each a real asyncio task awaiting its ticket:
all cancelled at once, all drained one slot at a time, and a mixed storm of cancels, timeouts,
sheds and live limit changes. The counts come back to zero and no task outlives the test.

Over sockets the same 10,000 is a soak (bench/soak_gateway.py): two processes' worth of file
descriptors does not fit the default run.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from llmtop.gateway.admission.controller import AdmissionController, Limits, Rejected, Ticket
from tests.support.faults import FIGURES

N = 10_000
PRIOS = ("high", "normal", "low")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def check_accounts(ctl: AdmissionController) -> None:
    assert ctl.offered == sum(ctl.outcomes.values()) + ctl.in_flight + ctl.queued
    assert ctl.outcomes["rejected"] == sum(ctl.rejections.values())


async def until_queued(ctl: AdmissionController, n: int) -> None:
    for _ in range(100):
        if ctl.queued == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"queued {ctl.queued}, wanted {n}")


async def test_ten_thousand_waiters_cancelled_at_once() -> None:
    ctl = AdmissionController(Limits(max_concurrency=1, max_queue=N, queue_timeout_s=60.0))
    before = len(asyncio.all_tasks())
    holder = ctl.enter("normal")
    assert holder.admitted
    waiters = [asyncio.ensure_future(ctl.acquire(PRIOS[i % 3])) for i in range(N)]
    await until_queued(ctl, N)
    assert sum(ctl.queued_by_priority().values()) == N
    with pytest.raises(Rejected, match="queue full"):
        ctl.enter("low")
    for w in waiters:
        w.cancel()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert (ctl.queued, ctl.in_flight) == (0, 1)
    assert ctl.outcomes["cancelled"] == N
    holder.release()
    assert (ctl.queued, ctl.in_flight) == (0, 0)
    check_accounts(ctl)
    assert len(asyncio.all_tasks()) == before
    FIGURES["faults"] += 1
    FIGURES["requests"] += N + 2


async def test_ten_thousand_waiters_drain_through_one_slot_in_order() -> None:
    ctl = AdmissionController(Limits(max_concurrency=1, max_queue=N, queue_timeout_s=60.0))
    order: list[int] = []

    async def request(i: int) -> None:
        ticket = await ctl.acquire("normal")
        order.append(i)
        await asyncio.sleep(0)
        ticket.release()

    holder = ctl.enter()
    tasks = [asyncio.ensure_future(request(i)) for i in range(N)]
    await until_queued(ctl, N)
    holder.release()
    await asyncio.gather(*tasks)
    assert order == list(range(N))  # FIFO within a priority, nobody lost or run twice
    assert ctl.outcomes["completed"] == N + 1
    assert (ctl.queued, ctl.in_flight) == (0, 0)
    check_accounts(ctl)
    FIGURES["requests"] += N + 1


async def test_storm_of_cancels_timeouts_sheds_and_limit_changes() -> None:
    clock = FakeClock()
    ctl = AdmissionController(
        Limits(max_concurrency=4, max_queue=N, queue_timeout_s=5.0), clock=clock
    )
    rng = random.Random(7)
    outcomes: dict[str, int] = {}
    admitted: list[Ticket] = []

    async def request(i: int) -> None:
        try:
            ticket = await ctl.acquire(PRIOS[i % 3], prompt_tokens=rng.randint(1, 50))
        except Rejected as r:
            outcomes[r.reason] = outcomes.get(r.reason, 0) + 1
            return
        admitted.append(ticket)

    tasks = [asyncio.ensure_future(request(i)) for i in range(N)]
    await until_queued(ctl, N - 4)
    for _ in range(200):  # bounded: each step releases, cancels, times out or re-limits
        clock.now += 0.1
        action = rng.random()
        if action < 0.3 and admitted:
            admitted.pop(rng.randrange(len(admitted))).release(
                rng.choice(["completed", "cancelled"])
            )
        elif action < 0.5:
            for t in rng.sample(tasks, 50):
                t.cancel()
        elif action < 0.7:
            ctl.set_limits(
                {
                    "max_concurrency": rng.randint(1, 8),
                    "max_queue": rng.randint(100, N),
                    "max_inflight_prompt_tokens": rng.choice([None, 20, 200]),
                }
            )
        else:
            ctl.expire()
        await asyncio.sleep(0)
        check_accounts(ctl)
    # end: everyone waiting times out, everyone admitted finishes
    clock.now += 10.0
    ctl.expire()
    for t in tasks:
        if not t.done():
            t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for ticket in admitted:
        ticket.release()
    ctl.set_limits({"max_concurrency": 8})
    assert (ctl.queued, ctl.in_flight, ctl.in_flight_prompt_tokens) == (0, 0, 0)
    assert ctl.offered == N
    assert ctl.offered == sum(ctl.outcomes.values())
    check_accounts(ctl)
    assert sum(outcomes.values()) == ctl.outcomes["rejected"] + ctl.outcomes["timed_out"]
    FIGURES["faults"] += 1
    FIGURES["requests"] += N
