"""The prefill budget on a fake clock: prompt tokens admitted with no first token yet, counted
request by request; the engine's prefill rate measured over its busy time; the autopilot's
budget from it; unstreamed answers; and the accounting at the edges (a prompt of 0 tokens,
max_tokens of 1 or 100,000, a request that ends before its first token)."""

from __future__ import annotations

import pytest

from llmtop.gateway.admission.controller import AdmissionController, Limits
from llmtop.gateway.admission.estimates import BusyRate, PrefillRate
from llmtop.gateway.admission.footprint import FootprintModel, PromptShape
from llmtop.gateway.autopilot.autopilot import Autopilot
from llmtop.gateway.autopilot.drive import drive
from tests.support.admission import FakeClock, accounted
from tests.support.autopilot import sig


def make(clock: FakeClock, **kw: object) -> AdmissionController:
    base: dict[str, object] = {"max_concurrency": 1024, "max_queue": 64, "queue_timeout_s": 30.0}
    base.update(kw)
    return AdmissionController(Limits(**base), clock=clock, wall_clock=lambda: 5.0)  # type: ignore[arg-type]


def test_prefill_rate_counts_busy_time_only_and_batches_count_every_prompt() -> None:
    rate = PrefillRate()
    rate.pass_time(0.0, 0)
    rate.pass_time(10.0, 0)  # idle for 10 s: no time counted
    assert rate.rate() is None
    rate.pass_time(10.5, 5000)  # ten 500-token prompts prefilled together in 0.5 s
    rate.prefilled(5000)
    got = rate.rate()
    assert got is not None
    assert got == pytest.approx(10_000, rel=0.05)  # not 500 / 0.5 s per request


def test_busy_rate_forgets_over_its_window() -> None:
    r = BusyRate()
    r.advance(0.0, 0.0)
    r.advance(1.0, 1.0)
    r.add(100.0)
    r.advance(11.0, 0.0)  # 10 s later, all idle: both decayed alike, the rate is kept
    assert r.rate() == pytest.approx(100.0)
    r.advance(211.0, 0.0)  # minutes idle: too little busy time left to claim a rate
    assert r.rate() is None


async def test_one_prompt_at_a_time_until_the_first_answers() -> None:
    clock = FakeClock()
    ctl = make(clock, max_unprefilled_prompt_tokens=1)
    first = ctl.enter(prompt_tokens=4000)
    second = ctl.enter(prompt_tokens=4000)
    assert first.admitted
    assert second.queued
    assert ctl.unprefilled_tokens == 4000
    assert ctl.binding() == "max_unprefilled_prompt_tokens"
    clock.advance(0.3)
    first.first_token()
    assert second.admitted  # room for the next prompt at the first token, not at the end
    assert ctl.unprefilled_tokens == 4000
    rate = ctl.prefill_tok_per_s()
    assert rate is not None
    assert rate == pytest.approx(4000 / 0.3)
    first.first_token()  # idempotent
    assert ctl.unprefilled_tokens == 4000
    second.release()  # ended before its first token: its prompt leaves the backlog
    first.release()
    assert ctl.unprefilled_tokens == 0
    accounted(ctl)


async def test_the_autopilot_sets_the_budget_from_the_measured_rate_and_names_what_binds() -> None:
    clock = FakeClock()
    ctl = make(clock, mode="auto", max_inflight_kv_blocks=1000)
    ctl.footprint = FootprintModel(16)
    pilot = Autopilot()
    drive(ctl, pilot, sig(), clock.now)
    assert ctl.limits.max_unprefilled_prompt_tokens == 1  # no rate yet: one at a time
    t = ctl.enter(prompt_tokens=4000, kv_blocks=266)
    clock.advance(0.4)
    t.first_token()  # 10,000 prompt tokens a busy second
    drive(ctl, pilot, sig(), clock.now)
    assert ctl.limits.max_unprefilled_prompt_tokens == 4000  # 0.4 s of it
    a = ctl.enter(prompt_tokens=3000, kv_blocks=200)
    b = ctl.enter(prompt_tokens=3000, kv_blocks=200)
    assert a.admitted
    assert b.queued
    drive(ctl, pilot, sig(), clock.now)
    status = ctl.autopilot
    assert status is not None
    assert status["binding"] == "max_unprefilled_prompt_tokens"
    assert status["binding_reason"] == (
        "prefill backlog 3,000 tokens, budget 4,000: holding new prompts"
    )
    assert "10,000 prompt tok/s prefilled x 0.4s" in status["prefill_reason"]
    assert ctl.stats()["binding"] == "max_unprefilled_prompt_tokens"
    a.first_token()
    assert b.admitted
    for x in (t, a, b):
        x.release()
    accounted(ctl)


async def test_an_unread_scrape_holds_the_kv_budget_but_the_prefill_count_goes_on() -> None:
    clock = FakeClock()
    ctl = make(clock, mode="auto", max_inflight_kv_blocks=1000)
    pilot = Autopilot()
    drive(ctl, pilot, sig(), clock.now)
    t = ctl.enter(prompt_tokens=2000)
    clock.advance(0.2)
    t.first_token()
    drive(ctl, pilot, None, clock.now, unread="ClientConnectorError")
    assert ctl.limits.max_inflight_kv_blocks == 1000
    assert ctl.limits.max_unprefilled_prompt_tokens == 4000
    assert ctl.autopilot is not None
    assert "unreadable (ClientConnectorError): holding" in ctl.autopilot["reason"]
    t.release()
    accounted(ctl)


async def test_an_unstreamed_answer_leaves_the_backlog_when_its_prefill_is_predicted_done() -> None:
    clock = FakeClock()
    ctl = make(clock, max_unprefilled_prompt_tokens=4000)
    warm = ctl.enter(prompt_tokens=4000)
    clock.advance(0.4)
    warm.first_token()  # 10,000 tokens a second
    whole = ctl.enter(
        prompt_tokens=3000, shape=PromptShape(3000, True, 16, stream=False), kv_blocks=0
    )
    waiting = ctl.enter(prompt_tokens=3000)
    assert waiting.queued
    clock.advance(0.2)
    ctl.expire()
    assert waiting.queued  # 3,000 tokens at 10,000/s: not yet
    clock.advance(0.15)
    ctl.expire()
    assert waiting.admitted  # predicted done at 0.3 s: its prompt left the backlog
    for x in (warm, whole, waiting):
        x.release()
    assert ctl.unprefilled_tokens == 0
    accounted(ctl)


@pytest.mark.parametrize(("prompt", "max_tokens"), [(0, 1), (1, 100_000), (100_000, 1), (0, None)])
async def test_odd_sizes_never_break_the_accounting(prompt: int, max_tokens: int | None) -> None:
    clock = FakeClock()
    ctl = make(clock, max_unprefilled_prompt_tokens=1000, max_inflight_kv_blocks=500)
    fm = FootprintModel(16)
    shape = PromptShape(prompt, True, max_tokens)
    tickets = [ctl.enter(prompt_tokens=prompt, kv_blocks=fm.blocks(shape)) for _ in range(3)]
    assert tickets[0].admitted  # alone, whatever its size
    for t in tickets:
        if t.admitted:
            t.first_token()
    for t in tickets:
        if t.queued:
            t.cancel()
        else:
            t.release()
    assert ctl.unprefilled_tokens == 0
    assert ctl.in_flight == 0
    assert ctl.in_flight_kv_blocks == 0
    assert sum(ctl.outcomes.values()) == 3  # each ended in exactly one outcome
    accounted(ctl)
