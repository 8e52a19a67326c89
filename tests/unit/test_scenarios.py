"""Scenarios: phase arithmetic, and that each story holds on the simulated engine in virtual time
(the gateway modelled as a FIFO cap): the flood exhausts the KV cache and the cap fixes it."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import pytest

from llmtop.demo.scenarios import DEFAULT, SCENARIOS, Scenario, describe_all, get_scenario
from llmtop.errors import UsageError
from llmtop.settings import HealthSettings, SimSettings
from llmtop.sim.model import Engine, EngineConfig, Sequence
from llmtop.sim.profiles import get_profile

CAP = 8
"""The cap the stories must recover under in virtual time: a bound, not advice (the demo
applies what the live finding suggests)."""


def test_phase_lookup_and_looping() -> None:
    s = get_scenario("story")
    assert s.at(0)[1].name == "baseline"
    assert s.at(31)[1].name == "rising"
    assert s.at(s.cycle_s - 1)[1].name == "calm"
    assert s.at(s.cycle_s + 1)[1].name == "baseline"  # loops
    assert s.stream_names() == ("chat", "long-prompts")


def test_non_looping_scenario_holds_its_last_phase() -> None:
    s = Scenario("x", "x", get_scenario("steady").phases, loop=False)
    assert s.at(10_000)[0] == len(s.phases) - 1


def test_every_scenario_is_well_formed() -> None:
    assert DEFAULT in SCENARIOS
    fields = set(SimSettings.__dataclass_fields__)
    health_fields = set(HealthSettings.__dataclass_fields__)
    for s in SCENARIOS.values():
        assert s.phases
        assert all(p.duration_s > 0 for p in s.phases)
        assert set(s.sim) <= fields
        assert set(s.health) <= health_fields
        profile = get_profile(s.sim.get("profile", "seed"))
        max_len = s.sim.get("max_model_len") or min(
            profile.max_model_len, s.sim.get("kv_tokens") or profile.derived_kv_tokens()
        )
        for p in s.phases:
            for st in p.streams:
                assert st.prompt_tokens[1] + st.output_tokens <= max_len, (s.name, st.name)
        if s.cap_at_s is not None:
            assert 0 < s.cap_at_s < s.cycle_s
        assert s.name in describe_all()
    with pytest.raises(UsageError, match="known: story"):
        get_scenario("nope")


@dataclass
class Second:
    """One second of a virtual run."""

    t: int
    waiting: int
    kv: float
    preemptions: int
    ttft_max_s: float | None
    """Largest engine-side TTFT among the requests whose first token came this second."""


def run_virtual(s: Scenario, seconds: int, cap: int | None, cap_at_s: float) -> list[Second]:
    """Closed-loop streams as the scenario says, through a FIFO gateway cap, in virtual time."""
    sim = s.sim
    config = EngineConfig.from_profile(
        get_profile(sim.get("profile", "seed")), kv_tokens=sim.get("kv_tokens")
    )
    engine = Engine(config)
    rng = random.Random(0)
    queue: deque[str] = deque()
    inflight: dict[int, str] = {}
    live: dict[str, int] = {}
    rows: list[Second] = []
    ttfts: list[float] = []
    next_row = 1.0
    while engine.now < seconds:
        _, phase = s.at(engine.now)
        shapes = {st.name: st for st in phase.streams}
        for name, st in shapes.items():
            while live.get(name, 0) < st.concurrency:
                live[name] = live.get(name, 0) + 1
                queue.append(name)
        limit = cap if cap is not None and engine.now >= cap_at_s else 10**9
        while queue and len(inflight) < limit:
            name = queue.popleft()
            shape = shapes.get(name)
            if shape is None:  # its phase is over: the client goes away
                live[name] -= 1
                continue
            seq: Sequence = engine.add_request(
                rng.randint(*shape.prompt_tokens), shape.output_tokens
            )
            inflight[id(seq)] = name
        if engine.has_work():
            result = engine.step()
            ttfts += [q.ttft_s or 0.0 for q in result.emitted if q.num_output == 1]
            for q in result.finished:
                live[inflight.pop(id(q))] -= 1
        else:
            engine.advance_to(engine.now + 0.01)
        if engine.now >= next_row:
            rows.append(
                Second(
                    int(next_row),
                    len(engine.waiting),
                    engine.kv_cache_usage,
                    engine.stats.num_preemptions,
                    max(ttfts) if ttfts else None,
                )
            )
            ttfts = []
            next_row += 1.0
    return rows


def test_quick_story_breaks_then_the_cap_fixes_it() -> None:
    s = get_scenario("quick")
    assert s.cap_at_s is not None
    slo = HealthSettings().slo.ttft_s
    before = run_virtual(s, 40, None, 0)
    flood = [r for r in before if 8 <= r.t <= 40]
    assert all(r.waiting > 0 for r in flood)
    assert max(r.kv for r in flood) >= 0.9
    assert max(r.ttft_max_s or 0 for r in flood) > 2 * slo
    capped = run_virtual(s, 40, CAP, s.cap_at_s)
    after = [r for r in capped if r.t >= s.cap_at_s + 8]
    assert after
    assert all(r.waiting == 0 for r in after)
    assert all(r.kv < 0.9 for r in after)
    assert max(r.ttft_max_s or 0 for r in after) < slo / 4
    assert after[-1].preemptions == after[0].preemptions  # no more thrashing


def test_story_reaches_tens_of_seconds_and_recovers_with_cap_8() -> None:
    s = get_scenario("story")
    assert s.cap_at_s is not None
    flood_start = sum(p.duration_s for p in s.phases[:4])
    cap_at = s.cap_at_s
    end = int(cap_at + 45)
    before = run_virtual(s, end, None, 0)
    worst = max(r.ttft_max_s or 0 for r in before if r.t >= flood_start)
    assert worst > 20  # "TTFT toward a minute"
    capped = run_virtual(s, end, CAP, cap_at)
    after = [r for r in capped if r.t >= cap_at + 30]
    assert all(r.waiting == 0 for r in after)
    assert max(r.ttft_max_s or 0 for r in after) < 1.0
