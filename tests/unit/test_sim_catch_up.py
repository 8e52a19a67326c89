"""The sim's step as its loop runs it when late (virtual time, no loop): a step caught up after
the fact admits only the requests that had arrived by its start; an idle engine starts at the
first arrival."""

from __future__ import annotations

from llmtop.settings import SimSettings
from llmtop.sim.server import SimServer


def test_a_late_step_admits_no_request_before_its_arrival() -> None:
    sim = SimServer(SimSettings(profile="fast", port=0))
    engine = sim.engine
    t = engine.now
    early = engine.add_request(16, 50, arrival_s=t)
    late = engine.add_request(16, 50, arrival_s=t + 0.05)  # ~11 steps of 4.5 ms later
    starts = []
    for _ in range(200):
        if not engine.has_work():
            break
        starts.append(engine.now)
        sim._step()
    assert early.first_scheduled_s == t
    assert late.first_scheduled_s >= late.arrival_s
    # the first step that started at or after its arrival took it in (FCFS, room for both)
    assert late.first_scheduled_s == min(s for s in starts if s >= late.arrival_s)
    assert late.ttft_s is not None
    assert late.ttft_s > 0
    assert list(engine.waiting) == []
    assert engine.stats.finished["length"] == 2


def test_an_idle_engine_starts_at_the_first_arrival_not_at_its_wake_up() -> None:
    sim = SimServer(SimSettings(profile="fast", port=0))
    engine = sim.engine
    t = engine.now
    first = engine.add_request(16, 4, arrival_s=t + 2.0)
    second = engine.add_request(16, 4, arrival_s=t + 3.0)
    result = sim._step()
    assert result.start_s == first.arrival_s  # idle until it came, then at once
    assert first.first_scheduled_s == first.arrival_s
    assert list(engine.waiting) == [second]  # not admitted a second before it came
