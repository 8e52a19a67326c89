"""The deadline queue's predicted start and the refusals checked against what happened
(gateway/admission/lifetimes.py, refusals.py), on a fake clock."""

from __future__ import annotations

import math

import pytest

from llmtop.gateway.admission.controller import AdmissionController, Limits, Rejected, Ticket
from llmtop.gateway.admission.footprint import FootprintModel, PromptShape
from llmtop.gateway.admission.lifetimes import Lifetimes
from llmtop.gateway.admission.refusals import HORIZON_S, OPEN_MAX
from tests.support.admission import FakeClock, accounted


def make(clock: FakeClock, **kw: object) -> AdmissionController:
    base: dict[str, object] = {
        "max_concurrency": 4,
        "max_queue": 2000,
        "queue_timeout_s": 30.0,
        "ttft_slo_s": 5.0,
        "queue_policy": "deadline",
    }
    base.update(kw)
    return AdmissionController(Limits(**base), clock=clock, wall_clock=lambda: 5.0)  # type: ignore[arg-type]


def staggered(ctl: AdmissionController, clock: FakeClock, life_s: float) -> list[Ticket]:
    """Four slots turned over once with lives of `life_s`, admitted `life_s`/4 apart: the
    holders at the end, the next due to end in `life_s`/4."""
    step = life_s / 4
    held = []
    for _ in range(4):
        held.append(ctl.enter())
        clock.advance(step)
    for i in range(4):
        if i:
            clock.advance(step)
        held.pop(0).release()
        held.append(ctl.enter())
    return held


def test_no_life_measured_predicts_nothing() -> None:
    lives = Lifetimes()
    assert lives.wait_s(0.0, [], 0, 1, 0) is None
    assert lives.wait_s(0.0, [], 0, 0, 0) == 0.0


async def test_the_next_start_is_the_earliest_end_not_a_rate_seen_while_queued() -> None:
    # lives of 20 s on 4 slots: one ends every 5 s; a newcomer behind nobody starts at the
    # next end (5 s away at most), whatever few releases fell inside someone's wait
    clock = FakeClock()
    ctl = make(clock)
    held = staggered(ctl, clock, 20.0)
    clock.advance(1.0)
    wait = ctl.predict_wait_s("normal", 0, clock())
    assert wait == pytest.approx(4.0)
    first = ctl.enter()  # 4.0 s < the 5 s budget: queued
    assert first.queued
    # the 2nd in line waits for the 2nd end (9 s): past the budget, refused with it
    with pytest.raises(Rejected) as e:
        ctl.enter()
    assert e.value.reason == "ttft_budget"
    assert "predicted start in 9.0s" in e.value.message
    for t in [first, *held]:
        t.cancel()
    accounted(ctl)


async def test_a_refusal_whose_slot_came_in_time_is_counted_as_such() -> None:
    clock = FakeClock()
    ctl = make(clock)
    held = staggered(ctl, clock, 20.0)
    first = ctl.enter()
    with pytest.raises(Rejected):
        ctl.enter()  # predicted 10 s: refused
    assert ctl.refusals.watching == 1
    # two requests end early (a short answer): the refused one's slot comes 1 s later
    clock.advance(1.0)
    held.pop(0).release()  # `first` takes this one
    assert first.admitted
    assert ctl.refusals.watching == 1  # `first` was ahead of it
    held.pop(0).release()
    assert ctl.refusals.watching == 0
    doc = ctl.stats()["refusals"]
    assert doc["refused"] == 1
    assert doc["settled"] == 1
    assert doc["slot_within_budget"] == 1
    assert doc["slot_p50_s"] == pytest.approx(1.0)
    assert doc["text"].startswith("refusals: 1, of which predicted wait > 10.0 s")
    assert "within 1.0 s: 1" in doc["text"]
    for t in [first, *held]:
        t.release()
    accounted(ctl)


async def test_a_refusal_whose_slot_never_came_is_closed_after_the_horizon() -> None:
    clock = FakeClock()
    ctl = make(clock)
    held = staggered(ctl, clock, 20.0)
    first = ctl.enter()
    with pytest.raises(Rejected):
        ctl.enter()
    clock.advance(HORIZON_S + 1)
    ctl.expire()  # `first` leaves at its budget; nothing frees a slot
    assert not first.queued
    assert not first.admitted
    doc = ctl.stats()["refusals"]
    assert (doc["watching"], doc["unsettled"], doc["slot_within_budget"]) == (0, 1, 0)
    for t in held:
        t.release()
    accounted(ctl)


@pytest.mark.parametrize("max_tokens", [1, 100_000])
async def test_a_burst_of_a_thousand_in_one_second_stays_sane(max_tokens: int) -> None:
    """1,000 arrivals in a second at a full gateway, max_tokens 1 or 100,000: every
    prediction finite and non-negative, the ledger bounded, every request one outcome."""
    clock = FakeClock()
    ctl = make(clock, max_concurrency=8, max_inflight_kv_blocks=400)
    ctl.footprint = FootprintModel(16)
    shape = PromptShape(500, True, max_tokens)
    blocks = ctl.footprint.blocks(shape)
    held = []
    for _ in range(8):  # a life measured, then the slots full
        t = ctl.enter(prompt_tokens=500, kv_blocks=blocks, shape=shape)
        if t.admitted:
            held.append(t)
        else:
            t.cancel()
    clock.advance(2.0)
    held.pop(0).release()
    queued: list[Ticket] = []
    for _ in range(1000):
        clock.advance(0.001)
        wait = ctl.predict_wait_s("normal", blocks, clock(), 500)
        assert wait is None or (math.isfinite(wait) and wait >= 0)
        try:
            t = ctl.enter(prompt_tokens=500, kv_blocks=blocks, shape=shape)
        except Rejected:
            continue
        (held if t.admitted else queued).append(t)
    assert ctl.refusals.watching <= OPEN_MAX
    assert ctl.offered == sum(ctl.outcomes.values()) + ctl.in_flight + ctl.queued
    for t in queued:
        t.cancel()
    for t in held:
        t.release()
    accounted(ctl)


async def test_a_scrape_that_fails_mid_burst_keeps_predictions_and_accounting_sane() -> None:
    """Auto mode, a burst of 300 in a second, the engine's /metrics unreadable from the 2nd
    tick on: the KV budget holds where it was, each prediction is finite, the ledger counts
    every 429 given for a predicted start, and every request ends in one outcome."""
    from llmtop.gateway.autopilot.autopilot import Autopilot
    from llmtop.gateway.autopilot.drive import drive
    from tests.support.autopilot import sig

    clock = FakeClock()
    ctl = make(clock, max_concurrency=8, mode="auto", queue_timeout_s=5.0)
    ctl.footprint = FootprintModel(16)
    pilot = Autopilot()
    drive(ctl, pilot, sig(), clock())
    budget = ctl.limits.max_inflight_kv_blocks
    assert budget == 1000
    shape = PromptShape(500, True, 350)
    blocks = ctl.footprint.blocks(shape)
    held: list[Ticket] = []
    queued: list[Ticket] = []
    for i in range(300):
        clock.advance(1 / 300)
        for t in held:  # the engine's first tokens: a prefill rate, the next prompts admitted
            t.first_token()
        held += [t for t in queued if t.admitted]
        queued = [t for t in queued if t.queued]
        if i % 100 == 99:
            drive(ctl, pilot, None, clock(), unread="ClientConnectorError")
            assert ctl.limits.max_inflight_kv_blocks == budget
        if i == 150 and held:  # one life measured: predictions from here on
            clock.advance(0.5)
            held.pop(0).release()
        wait = ctl.predict_wait_s("normal", blocks, clock(), 500)
        assert wait is None or (math.isfinite(wait) and wait >= 0)
        try:
            t = ctl.enter(prompt_tokens=500, kv_blocks=blocks, shape=shape)
        except Rejected:
            continue
        (held if t.admitted else queued).append(t)
    assert ctl.autopilot is not None
    assert "unreadable (ClientConnectorError)" in ctl.autopilot["reason"]
    doc = ctl.stats()["refusals"]
    assert doc["refused"] == ctl.rejections["ttft_budget"]
    assert 0 < doc["refused"] <= 300
    clock.advance(6.0)
    ctl.expire()
    for t in held:
        t.release()
    for t in queued:
        t.cancel()  # a no-op for those that left the queue at their budget
    for t in [t for t in queued if t.admitted]:
        t.release()
    accounted(ctl)
    assert ctl.in_flight == ctl.queued == 0
