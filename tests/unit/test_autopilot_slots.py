"""The autopilot in front of an engine with no KV figure (llama.cpp): it learns the slots from
the running count while requests wait inside the engine, caps admission there, steps one
lower while the TTFT measured at the gateway is over its share of the SLO, and says so."""

from __future__ import annotations

from llmtop.core.derive.signals import EngineSignals
from llmtop.gateway.admission.controller import AUTOPILOT
from llmtop.gateway.autopilot.autopilot import Autopilot
from llmtop.gateway.autopilot.drive import AUTO_MAX_CONCURRENCY, drive, suggestion
from llmtop.gateway.autopilot.slots import PROBE_EVERY, Slots
from tests.support.admission import FakeClock, make
from tests.support.autopilot import sig


def slot_sig(running: float, waiting: float) -> EngineSignals:
    return sig(
        kv_capacity_blocks=None, kv_block_size=None, kv_usage_frac=None, preemptions=None,
        running=running, waiting=waiting,
    )  # fmt: skip


def test_the_cap_learns_the_slots_and_holds_the_excess_at_the_gateway() -> None:
    ctl = make(FakeClock(), max_concurrency=AUTO_MAX_CONCURRENCY, mode="auto")
    pilot = Autopilot()
    drive(ctl, pilot, slot_sig(1, 0), 0.0)
    assert ctl.limits.max_concurrency == AUTO_MAX_CONCURRENCY  # nothing waited inside yet
    assert ctl.autopilot is not None
    assert "once requests wait inside it" in ctl.autopilot["reason"]
    drive(ctl, pilot, slot_sig(2, 22), 1.0)  # 22 deferred
    assert ctl.limits.max_concurrency == 2
    assert ctl.limits.max_inflight_kv_blocks is None
    assert ctl.events[-1]["source"] == AUTOPILOT
    assert "admits by the engine's 2 slots (no KV figure" in ctl.autopilot["reason"]


def test_a_slow_first_token_with_nothing_waiting_steps_one_lower_and_back() -> None:
    ctl = make(FakeClock(), max_concurrency=AUTO_MAX_CONCURRENCY, mode="auto")
    pilot = Autopilot()
    drive(ctl, pilot, slot_sig(4, 3), 0.0)
    assert ctl.limits.max_concurrency == 4
    slo = pilot.config.engine_ttft_share * pilot.config.ttft_slo_s
    ctl.estimates.engine_ttft_s = slo * 2  # the engine's share of TTFT, measured here
    drive(ctl, pilot, slot_sig(4, 0), 1.0)
    assert ctl.limits.max_concurrency == 3
    assert "over" in pilot.last_reason
    drive(ctl, pilot, slot_sig(3, 0), 2.0)
    assert ctl.limits.max_concurrency == 2
    ctl.estimates.engine_ttft_s = slo / 4
    for t in range(3, 8):
        drive(ctl, pilot, slot_sig(2, 0), float(t))
    assert ctl.limits.max_concurrency == 4  # back to the slots, never above
    assert "within" in pilot.last_reason


def test_advise_mode_suggests_the_cap_and_sets_nothing() -> None:
    ctl = make(FakeClock(), max_concurrency=64, mode="advise")
    pilot = Autopilot()
    drive(ctl, pilot, slot_sig(2, 5), 0.0)
    assert ctl.limits.max_concurrency == 64
    advice = suggestion(pilot, ctl.limits)
    assert advice["suggestion"]["max_concurrency"] == 2
    assert "cap 2 (now 64)" in advice["reason"]


def test_a_cap_under_the_slots_is_lifted_until_requests_wait_inside() -> None:
    """The gateway's start cap (8) under an engine's 16 slots would never let a request wait
    inside it: while the slots are unknown the cap is lifted, then set at what it ran."""
    ctl = make(FakeClock(), max_concurrency=8, mode="auto")
    pilot = Autopilot()
    drive(ctl, pilot, slot_sig(8, 0), 0.0)
    assert ctl.limits.max_concurrency == AUTO_MAX_CONCURRENCY
    assert "once requests wait inside it" in pilot.last_reason
    drive(ctl, pilot, slot_sig(16, 9), 1.0)
    assert ctl.limits.max_concurrency == 16


def test_a_slot_learned_short_is_found_by_trying_one_more() -> None:
    """A scrape taken as a slot was refilled reads 7 running of 8 with one waiting: learned 7.
    With every slot busy and requests queued at the gateway, one more is tried now and then;
    taken, it is a slot; deferred, the cap goes back."""
    s = Slots()
    assert s.step(slot_sig(7, 1), 0.0, 1.0, "llama.cpp") == 7
    for _ in range(PROBE_EVERY - 2):
        assert s.step(slot_sig(7, 0), 0.0, 1.0, "llama.cpp", queued=5) == 7
    assert s.step(slot_sig(7, 0), 0.0, 1.0, "llama.cpp", queued=5) == 8
    assert "trying one more" in s.reason
    assert s.step(slot_sig(8, 0), 0.0, 1.0, "llama.cpp", queued=5) == 8  # it ran 8: a slot
    assert s.slots == 8
    for _ in range(PROBE_EVERY - 1):
        s.step(slot_sig(8, 0), 0.0, 1.0, "llama.cpp", queued=5)
    assert s.step(slot_sig(8, 0), 0.0, 1.0, "llama.cpp", queued=5) == 9
    assert s.step(slot_sig(8, 1), 0.0, 1.0, "llama.cpp", queued=5) == 8  # deferred: back
    assert s.slots == 8
    assert s.step(slot_sig(8, 0), 0.0, 1.0, "llama.cpp", queued=0) == 8  # nothing queued here
