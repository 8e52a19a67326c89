"""AdmissionController on a fake clock: order, limits, live changes and exact accounting."""

from __future__ import annotations

import asyncio
import random

import pytest

from llmtop.gateway.admission.controller import (
    OUTCOMES,
    LimitError,
    Rejected,
    Ticket,
)
from tests.support.admission import FakeClock, accounted, make, settle


async def test_admits_up_to_max_concurrency_then_queues() -> None:
    clock = FakeClock()
    ctl = make(clock)
    a, b, c = ctl.enter(), ctl.enter(), ctl.enter()
    assert (a.admitted, b.admitted, c.admitted) == (True, True, False)
    assert (ctl.in_flight, ctl.queued) == (2, 1)
    waiter = asyncio.ensure_future(c.wait())
    clock.advance(3.0)
    a.release()
    await waiter
    assert c.admitted
    assert c.queue_wait_s == pytest.approx(3.0)
    b.release()
    c.release()
    assert (ctl.in_flight, ctl.queued) == (0, 0)
    assert ctl.outcomes["completed"] == 3
    accounted(ctl)


async def test_priority_order_and_fifo_within_priority() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, max_queue=10)
    first = ctl.enter()
    order: list[str] = []
    names = [("low", "l1"), ("normal", "n1"), ("low", "l2"), ("high", "h1"), ("normal", "n2")]
    tickets: dict[str, Ticket] = {}
    for prio, name in names:
        tickets[name] = ctl.enter(prio)

    async def run(name: str) -> None:
        await tickets[name].wait()
        order.append(name)

    tasks = [asyncio.ensure_future(run(n)) for _, n in names]
    await settle()
    first.release()
    for _ in names:
        await settle()
        done = order[-1]
        tickets[done].release()
    await asyncio.gather(*tasks)
    assert order == ["h1", "n1", "n2", "l1", "l2"]
    accounted(ctl)


async def test_queue_full_is_an_immediate_429_naming_the_knob() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, max_queue=2)
    ctl.enter()
    ctl.enter()
    ctl.enter()
    with pytest.raises(Rejected) as e:
        ctl.enter()
    assert e.value.reason == "queue_full"
    assert e.value.message == "queue full: 2/2 waiting (max_queue)"
    assert int(e.value.retry_after_header) >= 1
    assert ctl.rejections["queue_full"] == 1
    accounted(ctl)


async def test_retry_after_follows_the_recent_drain_rate() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=4, max_queue=4, queue_timeout_s=30.0)
    # no drain yet: the queue timeout is the estimate
    assert ctl.retry_after_s() == 5.0  # no drain rate yet: a short guess, not queue_timeout
    for _ in range(10):  # 10 completions over 10 s: 1/s
        ctl.enter().release()
        clock.advance(1.0)
    held = [ctl.enter() for _ in range(8)]  # 4 in flight, 4 queued
    with pytest.raises(Rejected) as e:
        ctl.enter()
    # backlog of 4 ahead plus this one, at about one a second
    assert 4.0 <= e.value.retry_after_s <= 6.0
    assert e.value.retry_after_header in ("4", "5", "6")
    for t in held:
        t.release()


async def test_high_priority_displaces_the_newest_lower_waiter() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, max_queue=3)
    ctl.enter()
    low_old, low_new, normal = ctl.enter("low"), ctl.enter("low"), ctl.enter("normal")
    high = ctl.enter("high")
    assert high.queued
    with pytest.raises(Rejected) as e:
        await low_new.wait()
    assert e.value.reason == "displaced"
    assert "max_queue" in e.value.message
    assert low_old.queued
    assert normal.queued
    # a low arrival displaces nobody: same-or-higher waiters keep their place
    with pytest.raises(Rejected) as e2:
        ctl.enter("low")
    assert e2.value.reason == "queue_full"
    assert ctl.rejections == {
        "queue_full": 1,
        "displaced": 1,
        "shed": 0,
        "rate_limited": 0,
        "ttft_budget": 0,
    }
    accounted(ctl)


async def test_queue_timeout_counts_as_timed_out() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, queue_timeout_s=5.0)
    ctl.enter()
    early = ctl.enter()
    clock.advance(2.0)
    late = ctl.enter()
    clock.advance(3.0)
    assert ctl.expire() == 1
    with pytest.raises(Rejected) as e:
        await early.wait()
    assert e.value.reason == "queue_timeout"
    assert "queue_timeout_s" in e.value.message
    assert late.queued
    assert ctl.outcomes["timed_out"] == 1
    assert ctl.outcomes["rejected"] == 0
    clock.advance(2.0)
    assert ctl.expire() == 1
    assert ctl.queued == 0
    accounted(ctl)


async def test_cancelled_waiter_leaves_the_queue() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1)
    holder = ctl.enter()
    t = ctl.enter()
    task = asyncio.ensure_future(t.wait())
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ctl.queued == 0
    assert ctl.outcomes["cancelled"] == 1
    holder.release()
    assert ctl.in_flight == 0
    accounted(ctl)


async def test_cancel_after_grant_frees_the_slot() -> None:
    """Admitted and cancelled in the same tick: the slot is released, counted cancelled."""
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1)
    holder = ctl.enter()
    t = ctl.enter()
    task = asyncio.ensure_future(t.wait())
    await settle()
    holder.release()  # grants t, but its task has not run yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ctl.in_flight == 0
    assert ctl.outcomes == dict.fromkeys(OUTCOMES, 0) | {
        "completed": 1,
        "cancelled": 1,
    }
    accounted(ctl)


async def test_raising_concurrency_admits_waiters_at_once() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, max_queue=10)
    ctl.enter()
    waiting = [ctl.enter() for _ in range(3)]
    ctl.set_limits({"max_concurrency": 3}, source="tui")
    assert [t.admitted for t in waiting] == [True, True, False]
    assert ctl.events[-1] == {
        "time": 5.0,
        "field": "max_concurrency",
        "old": 1,
        "new": 3,
        "source": "tui",
    }


async def test_lowering_concurrency_lets_in_flight_finish_and_admits_nobody() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=3, max_queue=10)
    running = [ctl.enter() for _ in range(3)]
    ctl.set_limits({"max_concurrency": 1})
    queued = ctl.enter()
    assert ctl.in_flight == 3
    assert queued.queued
    running[0].release()
    running[1].release()
    assert queued.queued  # still 1 in flight, at the cap
    running[2].release()
    assert queued.admitted
    queued.release()
    accounted(ctl)


async def test_shrinking_the_queue_sheds_newest_lowest_priority() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, max_queue=10)
    ctl.enter()
    h = ctl.enter("high")
    n1, n2 = ctl.enter("normal"), ctl.enter("normal")
    low = ctl.enter("low")
    ctl.set_limits({"max_queue": 2})
    assert h.queued
    assert n1.queued
    assert not n2.queued
    assert not low.queued
    for t in (n2, low):
        with pytest.raises(Rejected) as e:
            await t.wait()
        assert e.value.reason == "shed"
    assert ctl.rejections["shed"] == 2
    accounted(ctl)


async def test_pause_holds_the_queue_and_resume_admits() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=2)
    ctl.set_paused(True)
    t = ctl.enter()
    assert t.queued
    assert ctl.in_flight == 0
    ctl.set_paused(False, source="tui")
    assert t.admitted
    assert [e["field"] for e in ctl.events] == ["paused", "paused"]
    assert ctl.events[-1]["source"] == "tui"
    t.release()
    accounted(ctl)


async def test_rate_limit_per_tenant() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=10, rate_limit_rpm=60.0)
    ctl.enter(tenant="a").release()
    with pytest.raises(Rejected) as e:
        ctl.enter(tenant="a")
    assert e.value.reason == "rate_limited"
    assert e.value.retry_after_header == "1"
    ctl.enter(tenant="b").release()  # another tenant has its own bucket
    clock.advance(1.0)
    ctl.enter(tenant="a").release()
    ctl.set_limits({"rate_limit_rpm": None})
    for _ in range(5):
        ctl.enter(tenant="a").release()
    assert ctl.rejections["rate_limited"] == 1
    accounted(ctl)


async def test_token_budget_weighs_prompts() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=8, max_queue=20, max_inflight_prompt_tokens=10_000)
    small = [ctl.enter(prompt_tokens=50) for _ in range(8)]
    assert all(t.admitted for t in small)
    for t in small:
        t.release()
    big = [ctl.enter(prompt_tokens=4000) for _ in range(8)]
    assert [t.admitted for t in big] == [True, True] + [False] * 6
    assert ctl.in_flight_prompt_tokens == 8000
    big[0].release()
    assert big[2].admitted
    assert not big[3].admitted
    # a prompt over the whole budget goes alone when nothing else is in flight
    for t in big:  # each release admits the next in line, so in order all are released
        t.release()
    assert ctl.in_flight == 0
    assert ctl.queued == 0
    huge = ctl.enter(prompt_tokens=50_000)
    assert huge.admitted
    huge.release()
    assert ctl.in_flight_prompt_tokens == 0
    accounted(ctl)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": "x"}, "max_concurrency"),
        ({"max_concurrency": True}, "max_concurrency"),
        ({"max_queue": -1}, "max_queue"),
        ({"queue_timeout_s": 0}, "queue_timeout_s"),
        ({"queue_timeout_s": None}, "queue_timeout_s"),
        ({"rate_limit_rpm": -5}, "rate_limit_rpm"),
        ({"max_inflight_prompt_tokens": 1.5}, "max_inflight_prompt_tokens"),
        ({"bogus": 1}, "bogus"),
    ],
)
async def test_bad_limit_changes_name_the_field_and_change_nothing(
    changes: dict[str, object], field: str
) -> None:
    ctl = make(FakeClock())
    before = ctl.limits
    with pytest.raises(LimitError) as e:
        ctl.set_limits(changes)
    assert e.value.field == field
    assert field in e.value.message
    assert ctl.limits == before
    assert not ctl.events


async def test_stats_shape_and_windows() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1)
    a = ctl.enter()
    b = ctl.enter("low")
    clock.advance(4.0)
    a.release()
    ctl.record_ttft(0.25)
    s = ctl.stats()
    assert s["queued_by_priority"] == {"high": 0, "normal": 0, "low": 0}
    assert s["in_flight"] == 1
    assert s["offered"] == 2
    assert s["queue_wait_s"] == {"p50": 0.0, "p95": 4.0}
    assert s["ttft_s"] == {"p50": 0.25, "p95": 0.25}
    assert s["window_s"] == 60
    assert s["limits"]["max_queue"] == 4
    clock.advance(61.0)
    s = ctl.stats()
    assert s["queue_wait_s"] == {"p50": None, "p95": None}
    b.release()


async def test_random_traffic_accounting_returns_to_zero() -> None:
    """Random arrivals, releases, cancels, timeouts and live changes: every request is
    counted once and the gateway empties when traffic stops."""
    rng = random.Random(7)
    clock = FakeClock()
    ctl = make(clock, max_concurrency=3, max_queue=6, queue_timeout_s=3.0, rate_limit_rpm=600.0)
    admitted: list[Ticket] = []
    waiters: dict[asyncio.Task[None], Ticket] = {}

    for _ in range(600):
        op = rng.random()
        if op < 0.45:
            try:
                t = ctl.enter(rng.choice(["high", "normal", "low"]), tenant=rng.choice("abc"))
            except Rejected:
                continue
            if t.admitted:
                admitted.append(t)
            else:
                waiters[asyncio.ensure_future(t.wait())] = t
        elif op < 0.7 and admitted:
            admitted.pop(rng.randrange(len(admitted))).release(
                rng.choice(["completed", "upstream_error", "cancelled"])
            )
        elif op < 0.75 and waiters:
            task = rng.choice(list(waiters))
            task.cancel()
        elif op < 0.8:
            ctl.set_limits({"max_concurrency": rng.randint(1, 5), "max_queue": rng.randint(0, 8)})
        else:
            clock.advance(rng.random())
            ctl.expire()
        await settle()
        for task in [t for t in waiters if t.done()]:
            ticket = waiters.pop(task)
            if not task.cancelled() and task.exception() is None:
                admitted.append(ticket)
        accounted(ctl)
        assert ctl.in_flight == len(admitted)
    for _ in range(50):
        for t in admitted:
            t.release()
        admitted.clear()
        clock.advance(1.0)
        ctl.expire()
        await settle()
        for task in [t for t in waiters if t.done()]:
            ticket = waiters.pop(task)
            if not task.cancelled() and task.exception() is None:
                admitted.append(ticket)
        if not waiters and not admitted:
            break
    assert (ctl.in_flight, ctl.queued, ctl.in_flight_prompt_tokens) == (0, 0, 0)
    accounted(ctl)
    assert ctl.offered > 200


async def test_ticket_cancel_is_idempotent_in_every_state() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1)
    running = ctl.enter()
    queued = ctl.enter()
    queued.cancel()
    queued.cancel()
    assert ctl.queued == 0
    running.cancel()
    running.release()  # already ended: no second outcome
    assert ctl.in_flight == 0
    assert ctl.outcomes["cancelled"] == 2
    done = ctl.enter()
    done.release()
    done.cancel()
    assert ctl.outcomes["completed"] == 1
    assert ctl.outcomes["cancelled"] == 2
    accounted(ctl)
