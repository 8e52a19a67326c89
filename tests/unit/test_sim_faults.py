"""`llmtop sim --fault`: the faults parse with one-line errors, and a stuck scheduler admits
nothing from its start on while what runs finishes (vLLM issue #53130's engine)."""

from __future__ import annotations

import pytest

from llmtop.errors import UsageError
from llmtop.settings import SimSettings
from llmtop.sim.faults import Fault, FaultSchedule, parse_fault, parse_faults
from llmtop.sim.model import FINISHED, WAITING, Engine, EngineConfig
from llmtop.sim.profiles import get_profile
from llmtop.sim.server import banner, build_engine


def test_faults_parse() -> None:
    assert parse_fault("scheduler-stuck") == Fault("scheduler-stuck", 0.0)
    assert parse_fault("scheduler-stuck@30") == Fault("scheduler-stuck", 30.0)
    with pytest.raises(
        ValueError, match=r"unknown fault 'hang' \(known: scheduler-stuck, slow, garbage\)"
    ):
        parse_fault("hang")
    with pytest.raises(
        ValueError, match=r"expected NAME\[@SECONDS\]\[\+FOR\], e\.g\. scheduler-stuck@30"
    ):
        parse_fault("scheduler-stuck@soon")
    with pytest.raises(ValueError, match="0 or more seconds"):
        parse_fault("scheduler-stuck@-1")
    with pytest.raises(UsageError, match="llmtop sim: unknown fault 'hang'"):
        build_engine(SimSettings(fault="hang"), now=0.0)


def test_timed_faults_parse_and_hold_for_their_window() -> None:
    assert parse_faults("slow@30+20, garbage+10") == (
        Fault("slow", 30.0, 20.0),
        Fault("garbage", 0.0, 10.0),
    )
    with pytest.raises(ValueError, match=r"e\.g\. slow@30\+10"):
        parse_fault("slow+soon")
    with pytest.raises(ValueError, match="more than 0 seconds"):
        parse_fault("garbage+0")
    with pytest.raises(ValueError, match=r"scheduler-stuck is for good \(no \+FOR\)"):
        parse_fault("scheduler-stuck+5")
    schedule = FaultSchedule()
    for f in parse_faults("slow@30+20,garbage"):
        schedule.add(f, now=100.0)
    assert not schedule.active("slow", 129.9)
    assert schedule.active("slow", 130.0)
    assert schedule.active("slow", 149.9)
    assert not schedule.active("slow", 150.0)
    assert schedule.active("garbage", 100.0)
    assert schedule.active("garbage", 1e9)  # for good
    assert schedule.starts("slow") == 130.0
    assert schedule.starts("scheduler-stuck") is None


def test_a_stuck_scheduler_lets_what_runs_finish_and_admits_nothing_after() -> None:
    e = Engine(EngineConfig.from_profile(get_profile("fast")), now=0.0)
    e.stuck_from_s = 1.0
    before = e.add_request(64, 8)
    while e.has_work():
        e.step()
    assert before.status == FINISHED
    e.advance_to(1.0)
    late = [e.add_request(64, 8) for _ in range(3)]
    assert not e.has_work()  # nothing it would do: the server's loop waits for work
    for _ in range(50):
        e.step()
    assert all(s.status == WAITING for s in late)
    assert len(e.waiting) == 3
    assert not e.running
    assert e.kv_cache_usage == 0.0
    tokens = e.stats.generation_tokens
    e.step()
    assert e.stats.generation_tokens == tokens


def test_the_banner_names_the_fault() -> None:
    engine = build_engine(SimSettings(fault="scheduler-stuck@5"), now=100.0)
    assert engine.stuck_from_s == 105.0
    assert "fault scheduler-stuck@5)" in banner(engine)
