"""Admission under a share of limits held elsewhere (Redis grants, live replicas); fake clock."""

from __future__ import annotations

from llmtop.gateway.admission.controller import AdmissionController, Limits
from llmtop.gateway.upstreams.shared import LocalLimits, fallback_share
from tests.support.admission import FakeClock, accounted, make, settle


async def test_share_caps_admission_and_raising_it_admits_the_queue() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=4)
    asked: list[tuple[int, int]] = []
    ctl.on_demand = lambda: asked.append(ctl.demand())
    ctl.set_share(1, None)
    a, b, c = ctl.enter(), ctl.enter(), ctl.enter()
    assert (a.admitted, b.admitted, c.admitted) == (True, False, False)
    assert asked == [(2, 0), (3, 0)]  # each waiter asks the driver for room
    ctl.set_share(2, None)
    await settle()
    assert b.admitted
    assert not c.admitted
    ctl.set_share(None, None)  # no outside cap: the limits alone (4)
    assert c.admitted
    a.release()
    assert asked[-1] == (2, 0)  # an end tells the driver it may give room back
    b.release()
    c.release()
    accounted(ctl)


async def test_zero_share_admits_nobody_even_when_idle() -> None:
    clock = FakeClock()
    ctl = make(clock)
    ctl.set_share(0, None)
    t = ctl.enter()
    assert t.queued
    clock.advance(11.0)
    assert ctl.expire() == 1
    assert ctl.outcomes["timed_out"] == 1
    accounted(ctl)


async def test_kv_share_and_a_prompt_over_the_whole_budget() -> None:
    clock = FakeClock()
    ctl = AdmissionController(
        Limits(max_concurrency=8, max_queue=4, queue_timeout_s=10.0, max_inflight_kv_blocks=100),
        clock=clock,
    )
    ctl.set_share(None, 30)
    a = ctl.enter(kv_blocks=20)
    b = ctl.enter(kv_blocks=20)
    assert a.admitted
    assert b.queued
    assert ctl.demand() == (2, 40)
    a.release()
    assert b.admitted
    b.release()
    big = ctl.enter(kv_blocks=500)  # over the whole budget: alone, but only with all of it
    assert big.queued
    ctl.set_share(None, 100)
    assert big.admitted
    big.release()
    accounted(ctl)


def test_fallback_share_is_the_limit_over_live_gateways() -> None:
    assert fallback_share(8, 3) == 2
    assert fallback_share(8, 0) == 8
    assert fallback_share(2, 3) == 1  # never nothing: each gateway keeps serving
    assert fallback_share(None, 3) is None
    assert LocalLimits().status() == {"backend": "local", "status": "ok"}
