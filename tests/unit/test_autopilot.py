"""Autopilot admission on a fake clock: footprints, the signals read from /metrics (core's
reader), the KV budget, the deadline queue, the mode switch and the controller's moves, and
holding when a figure is unknown."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

from llmtop.core.derive.signals import fleet_signals, signals
from llmtop.core.vllm.scrape import Histogram
from llmtop.gateway.admission.controller import (
    AUTOPILOT,
    AdmissionController,
    Limits,
    Rejected,
    Ticket,
)
from llmtop.gateway.admission.footprint import DEFAULT_OUTPUT_TOKENS, FootprintModel, read_shape
from llmtop.gateway.autopilot.autopilot import Autopilot
from llmtop.gateway.autopilot.drive import AUTO_MAX_CONCURRENCY, drive
from llmtop.gateway.autopilot.readings import overcommit
from llmtop.gateway.server.autopilot_loop import read_scrape
from llmtop.sim.metrics import MetricsRenderer
from llmtop.sim.model import Engine, EngineConfig
from llmtop.sim.profiles import get_profile
from tests.support.admission import FakeClock, accounted, settle
from tests.support.autopilot import FELT, sig


def make(clock: FakeClock, **kw: object) -> AdmissionController:
    base: dict[str, object] = {"max_concurrency": 1024, "max_queue": 64, "queue_timeout_s": 30.0}
    base.update(kw)
    return AdmissionController(Limits(**base), clock=clock, wall_clock=lambda: 5.0)  # type: ignore[arg-type]


# -- footprint ----------------------------------------------------------------------------------


def test_shape_exact_for_token_ids_estimated_for_text() -> None:
    ids = read_shape(json.dumps({"prompt": list(range(100)), "max_tokens": 20}).encode())
    assert (ids.tokens, ids.exact, ids.max_tokens) == (100, True, 20)
    chat = read_shape(
        json.dumps({"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 9}).encode()
    )
    assert (chat.tokens, chat.exact, chat.max_tokens) == (100, False, 9)
    assert read_shape(b"not json") == read_shape(b"[1]")


def test_blocks_are_prompt_plus_expected_output_in_whole_blocks() -> None:
    fm = FootprintModel(block_size=16)
    shape = read_shape(json.dumps({"prompt": [1] * 4000, "max_tokens": 256}).encode())
    assert fm.blocks(shape) == 266  # ceil(4256 / 16)
    no_max = read_shape(json.dumps({"prompt": [1] * 16}).encode())
    assert fm.blocks(no_max) == 1 + DEFAULT_OUTPUT_TOKENS // 16


def test_text_estimate_is_corrected_by_the_engines_count() -> None:
    fm = FootprintModel()
    shape = read_shape(json.dumps({"prompt": "y" * 4000}).encode())  # estimate 1,000 tokens
    assert fm.prompt_tokens(shape) == 1000
    for _ in range(3):
        fm.admitted(shape)
        fm.learn(1500.0, None, None)  # the engine counted 1.5x what we guessed
    assert fm.ratio == pytest.approx(1.5)
    assert fm.prompt_tokens(shape) == 1500
    exact = read_shape(json.dumps({"prompt": [1] * 50}).encode())
    assert fm.prompt_tokens(exact) == 50  # token ids are never corrected


def test_output_quantile_is_learned_and_capped_by_max_tokens() -> None:
    fm = FootprintModel()
    out = ((100.0, 0.0), (200.0, 90.0), (500.0, 100.0), (float("inf"), 100.0))
    fm.learn(0.0, Histogram(out, 20_000.0, 100.0), 16)
    assert fm.output_quantile == pytest.approx(200.0)
    assert fm.expected_output(None) == 200
    assert fm.expected_output(50) == 50
    assert fm.expected_output(1000) == 200


# -- /metrics ---------------------------------------------------------------------------------


def test_reads_capacity_and_preemptions_from_the_sims_real_metrics() -> None:
    eng = Engine(EngineConfig.from_profile(get_profile("seed")))
    render = MetricsRenderer(eng, "m", 0.0).render
    first = read_scrape(render())
    assert (first.kv_capacity_tokens, first.kv_block_size) == (38_800, 16)
    assert signals(first, None, 1.0).kv_capacity_blocks == 2425
    for _ in range(64):
        eng.add_request(4000, 64)
    while eng.has_work():
        eng.step()
    second = read_scrape(render())
    s = signals(second, first, 10.0)
    assert s.preemptions_per_s == pytest.approx(eng.stats.num_preemptions / 10.0)
    assert eng.stats.num_preemptions > 0
    assert s.prompt_tokens == 64 * 4000
    assert s.prompt_tok_per_s == 64 * 4000 / 10.0
    assert s.ttft_p95_s is not None
    assert s.ttft_p95_s > 1.0
    assert s.prefill_s_hist is not None
    assert s.prefill_s_hist.count == 64
    assert s.output_tokens_hist is not None
    assert s.output_tokens_hist.buckets[-1][1] == 64


def _engine_text(label: str) -> str:
    """The real vLLM capture as engine `label` of a data-parallel server."""
    text = Path("tests/fixtures/metrics-load.txt").read_text()
    return "\n".join(
        line.replace('engine="0"', f'engine="{label}"')
        for line in text.splitlines()
        if not line.startswith("#")
    )


def test_data_parallel_engines_add_capacity_and_average_kv_use() -> None:
    one = signals(read_scrape(Path("tests/fixtures/metrics-load.txt").read_text()), None, 1.0)
    both = signals(read_scrape(_engine_text("0") + "\n" + _engine_text("1") + "\n"), None, 1.0)
    assert one.kv_capacity_blocks is not None
    assert both.kv_capacity_blocks == 2 * one.kv_capacity_blocks
    assert both.kv_usage_frac == pytest.approx(one.kv_usage_frac)  # a mean of equals, not a sum
    assert one.waiting is not None
    assert both.waiting == 2 * one.waiting


def test_replicas_add_up_and_a_restart_on_one_is_not_a_negative_rate() -> None:
    engines = [Engine(EngineConfig.from_profile(get_profile("seed"))) for _ in range(2)]
    renders = [MetricsRenderer(e, "m", 0.0).render for e in engines]
    first = [read_scrape(r()) for r in renders]
    for e in engines:
        for _ in range(64):
            e.add_request(4000, 64)
        while e.has_work():
            e.step()
    second = [read_scrape(r()) for r in renders]
    both = fleet_signals(list(zip(second, first, strict=True)), 10.0)
    one = signals(second[0], first[0], 10.0)
    assert both.kv_capacity_blocks == 2 * 2425
    preempted = sum(e.stats.num_preemptions for e in engines)
    assert both.preemptions_per_s == pytest.approx(preempted / 10.0)
    assert both.prompt_tokens == 2 * 64 * 4000
    assert both.output_tokens_hist is not None
    assert both.output_tokens_hist.count == 2 * 64
    assert both.ttft_p95_s == pytest.approx(one.ttft_p95_s, rel=0.2)
    # replica 1 restarted: its counters start again from zero, the other's interval stands
    fresh = read_scrape(MetricsRenderer(Engine(engines[1].config), "m", 0.0).render())
    after = fleet_signals([(second[0], first[0]), (fresh, second[1])], 10.0)
    assert after.preemptions_per_s == one.preemptions_per_s  # the fresh one's count from 0
    assert after.prompt_tokens == 64 * 4000
    assert after.itl_mean_s == pytest.approx(one.itl_mean_s)


def test_a_full_replica_with_a_queue_cuts_even_when_the_mean_is_low() -> None:
    pilot = Autopilot()
    pilot.reset(1000)
    jammed = sig(
        kv_capacity_blocks=1000, waiting=5.0, kv_usage_frac=0.5, kv_usage_frac_waiting=0.97
    )
    moves = [pilot.step(float(t), jammed, in_flight_blocks=900, queued=3) for t in range(4)]
    cut = [m for m in moves if m is not None]
    assert cut
    assert cut[-1].new < 1000
    assert "at KV 97%" in cut[-1].reason


# -- KV budget and the deadline queue ---------------------------------------------------------


def drain_while_queued(
    ctl: AdmissionController,
    clock: FakeClock,
    slots: int,
    every_s: float,
    tenant: str | None = None,
) -> list[Ticket]:
    """Fill `slots` one every `every_s`, then release one every `every_s` with a request
    waiting each time: every life measured is slots x every_s (what a wait is predicted from).
    The slots' holders at the end (one just admitted), the queue empty."""
    held = []
    for _ in range(slots):
        held.append(ctl.enter(tenant=tenant))
        clock.advance(every_s)
    for i in range(slots):
        waiter = ctl.enter(tenant=tenant)
        assert waiter.queued
        if i:
            clock.advance(every_s)
        held.pop(0).release()
        assert waiter.admitted
        held.append(waiter)
    return held


async def test_eight_long_prompts_and_eighty_short_chats_both_fit_the_cache() -> None:
    clock = FakeClock()
    fm = FootprintModel(16)
    for prompt, out, n in ((4000, 256, 8), (200, 150, 80)):
        ctl = make(clock, max_inflight_kv_blocks=2425)
        shape = read_shape(json.dumps({"prompt": [1] * prompt, "max_tokens": out}).encode())
        tickets = [ctl.enter(kv_blocks=fm.blocks(shape)) for _ in range(n)]
        assert all(t.admitted for t in tickets)
        extra = ctl.enter(kv_blocks=fm.blocks(shape) * (2425 // fm.blocks(shape) - n + 1))
        assert not extra.admitted  # one more than the cache holds waits
        extra.cancel()
        accounted(ctl)


async def test_deadline_queue_refuses_at_once_with_when_capacity_is_expected() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=2, ttft_slo_s=5.0, queue_policy="deadline")
    running = drain_while_queued(ctl, clock, slots=2, every_s=0.5)  # 2 a second, room the limit
    queued = []
    refused: Rejected | None = None
    for _ in range(20):
        try:
            queued.append(ctl.enter())
        except Rejected as e:
            refused = e
            break
    # lives of 1 s on 2 slots, ends due in 0.5 and 1 s: the k-th in line starts in
    # 0.5 k s; the 11th in 5.5 s, past the 5 s budget
    assert len(queued) == 10
    assert not any(t.admitted for t in queued)
    assert refused is not None
    r = refused
    assert r.reason == "ttft_budget"
    assert "capacity expected in" in r.message
    assert "ttft_slo_s" in r.message
    assert r.retry_after_s > 0
    assert ctl.rejections["ttft_budget"] >= 1
    for t in running:
        t.release()
    await settle()
    for t in queued:
        if t.admitted:
            t.release()
    accounted(ctl)


async def test_a_waiter_whose_budget_passed_leaves_the_queue() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, ttft_slo_s=5.0, queue_policy="deadline")
    first = ctl.enter()
    late = ctl.enter()  # no drain rate yet: queued, not refused
    waiter = asyncio.ensure_future(late.wait())
    clock.advance(4.9)
    assert ctl.expire() == 0
    clock.advance(0.2)
    assert ctl.expire() == 1
    with pytest.raises(Rejected) as e:
        await waiter
    assert e.value.reason == "ttft_budget"
    assert ctl.outcomes["timed_out"] == 1
    first.release()
    accounted(ctl)


async def test_fifo_policy_keeps_todays_behaviour() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, ttft_slo_s=5.0)  # queue_policy fifo by default
    first = ctl.enter()
    second = ctl.enter()
    clock.advance(10.0)
    assert ctl.expire() == 0
    assert second.queued
    first.release()
    await settle()
    assert second.admitted
    second.release()
    accounted(ctl)


# -- mode ---------------------------------------------------------------------------------------


async def test_a_manual_change_of_a_lever_switches_to_manual_and_says_so() -> None:
    ctl = make(FakeClock(), mode="auto", max_inflight_kv_blocks=100)
    ctl.set_limits({"max_inflight_kv_blocks": 90}, source=AUTOPILOT, reason="preempting 1.0/s")
    assert ctl.limits.mode == "auto"
    assert ctl.events[-1]["reason"] == "preempting 1.0/s"
    ctl.set_limits({"max_queue": 10}, source="oncall")  # not a lever: stays auto
    assert ctl.limits.mode == "auto"
    ctl.set_limits({"max_concurrency": 8}, source="oncall")
    assert ctl.limits.mode == "manual"
    mode_event = next(e for e in ctl.events if e["field"] == "mode")
    assert mode_event["new"] == "manual"
    assert "autopilot off" in mode_event["reason"]
    ctl.set_limits({"mode": "auto"}, source="oncall")
    assert ctl.limits.mode == "auto"
    assert ctl.stats()["mode"] == "auto"


# -- the controller -----------------------------------------------------------------------------


def test_starts_at_the_cache_and_raises_the_ceiling_in_auto_mode() -> None:
    ctl = make(FakeClock(), max_concurrency=8, mode="auto")
    pilot = Autopilot()
    drive(ctl, pilot, sig(), 0.0)
    assert ctl.limits.max_inflight_kv_blocks == 1000
    assert ctl.limits.max_concurrency == AUTO_MAX_CONCURRENCY
    assert ctl.autopilot is not None
    assert "start at the KV cache" in ctl.autopilot["reason"]
    assert all(e["source"] == AUTOPILOT for e in ctl.events)


def test_manual_mode_moves_nothing() -> None:
    ctl = make(FakeClock(), max_inflight_kv_blocks=500)
    pilot = Autopilot()
    for t in range(5):
        drive(ctl, pilot, sig(preemptions=3.0), float(t))
    assert ctl.limits.max_inflight_kv_blocks == 500
    assert not ctl.events
    assert ctl.autopilot is not None
    assert ctl.autopilot["reason"].startswith("manual")


def plant(budget: int, held: float, cap: int = 1000) -> tuple[int, float]:
    """A steady load that always fills the budget: (blocks in flight, KV use)."""
    return budget, min(1.0, held * budget / cap)


def test_steady_load_settles_without_oscillation() -> None:
    pilot = Autopilot()
    budgets = []
    for t in range(300):
        b = pilot.applied or 1000
        in_flight, use = plant(b, held=0.8)
        pilot.step(
            float(t),
            sig(kv_usage_frac=use),
            in_flight_blocks=in_flight,
            queued=5,
            in_flight=b // 10,
        )
        budgets.append(pilot.applied)
    assert budgets[-1] == budgets[-200]  # no move in the last 200 steps
    assert budgets[-1] == pytest.approx(overcommit(1000, 0.8, 10, 0.92), rel=0.03)
    last = budgets[-1]
    assert last is not None
    assert last > 1000  # small requests part-way through: past the cache
    ups = [b - a for a, b in itertools.pairwise(budgets) if a and b and b > a]
    assert len(ups) >= 1
    assert all(u <= 0.05 * 1000 for u in ups[1:])  # at once to the safe level, past it slowly


def test_some_preemption_is_the_engines_business_thrashing_is_cut_with_a_ceiling() -> None:
    pilot = Autopilot()
    pilot.step(0.0, sig(), in_flight_blocks=0, queued=0)
    pilot.reset(1400)
    # vLLM preempting a little while requests finish: its own scheduling, no cut
    calm = pilot.step(
        1.0,
        sig(preemptions=0.4, kv_usage_frac=1.0),
        in_flight_blocks=1300,
        queued=9,
        finished_per_s=5.0,
    )
    assert calm is None or calm.new >= 1400
    # more preemptions than half the requests finishing, 3 scrapes in a row: thrashing, cut
    # below what ran (one or two such scrapes are a step's worth, not a storm)
    moves = [
        pilot.step(
            t,
            sig(preemptions=4.0, kv_usage_frac=1.0, itl_s_hist=FELT),
            in_flight_blocks=1300,
            queued=9,
            finished_per_s=5.0,
        )
        for t in (1.2, 1.4, 2.0)
    ]
    assert not any(m is not None and m.new < 1400 for m in moves[:2])
    move = moves[2]
    assert move is not None
    assert move.new == round(1300 * 0.9)
    assert "thrashing: preempting 4.0/s, 5.0/s finishing, mean ITL 70 ms > 50 ms" in move.reason
    for t in range(3, 20):  # headroom signalled, but the ceiling holds it below 1,300
        pilot.step(
            float(t),
            sig(kv_usage_frac=0.5),
            in_flight_blocks=pilot.applied or 0,
            queued=9,
            in_flight=100,
        )
    assert pilot.applied is not None
    assert 1100 < pilot.applied < 1300
    for t in range(20, 200):  # ...and is forgotten slowly: it comes back above it
        pilot.step(
            float(t),
            sig(kv_usage_frac=0.5),
            in_flight_blocks=pilot.applied or 0,
            queued=9,
            in_flight=100,
        )
    assert pilot.applied > 1300


def test_a_storm_nobody_feels_is_not_cut() -> None:
    """The real vLLM's CPU engine: preempting 3 times a second with 2 finishing, its mean ITL
    20 ms and TTFT p95 0.3 s (a recompute is ~0.1 s there; straight served 98 % within the SLO
    so): no cut. The same storm with the ITL at 70 ms is cut."""
    quiet = Histogram(((0.05, 10.0), (0.1, 10.0), (float("inf"), 10.0)), 0.2, 10.0)
    for itl, cut in ((quiet, False), (FELT, True)):
        pilot = Autopilot()
        pilot.step(0.0, sig(), in_flight_blocks=0, queued=0)
        pilot.reset(1400)
        storm = sig(preemptions=3.0, kv_usage_frac=1.0, itl_s_hist=itl)
        for t in range(1, 6):
            pilot.step(float(t), storm, in_flight_blocks=1300, queued=9, finished_per_s=2.0)
        assert (pilot.applied == round(1300 * 0.9)) is cut, pilot.last_reason
        assert (pilot.applied == 1400) is not cut


def served(budget: int, best: int = 2200) -> float:
    """A plant whose requests served within the SLO per second peak at `best` blocks: more
    runs more until the cache thrashes, then fewer make it."""
    return budget / 100 if budget <= best else max(0.0, best / 100 - (budget - best) / 40)


def test_probes_up_while_served_within_slo_rises_and_takes_a_step_back_when_it_falls() -> None:
    pilot = Autopilot()
    budgets, reasons = [], []
    done = 0.0
    for t in range(400):
        b = pilot.applied or 1000
        in_flight, use = plant(b, held=0.5)  # the safe overcommit: ~1,690 blocks
        done += served(b)
        move = pilot.step(
            float(t),
            sig(kv_usage_frac=use),
            in_flight_blocks=in_flight,
            queued=5,
            in_flight=b // 50,
            finished_per_s=served(b),
            finished_total=done,
            served_total=done,
        )
        budgets.append(pilot.applied or 0)
        if move is not None:
            reasons.append(move.reason)
    assert max(budgets) > 2200  # past the safe overcommit, and past the best, to find it
    assert any("probing up" in r for r in reasons)
    assert any("probe taken back: served within SLO" in r for r in reasons)
    tail = budgets[-200:]
    assert all(1900 <= b <= 2350 for b in tail)  # ...and stays near the best since
    assert sum(served(b) for b in tail) / len(tail) >= 0.9 * served(2200)


def test_no_probe_without_requests_served_within_the_slo() -> None:
    pilot = Autopilot()
    for t in range(100):
        b = pilot.applied or 1000
        in_flight, use = plant(b, held=1.0)
        pilot.step(
            float(t),
            sig(kv_usage_frac=use),
            in_flight_blocks=in_flight,
            queued=5,
            in_flight=b // 50,
            finished_total=float(t * 10),
            served_total=0.0,
        )
    assert pilot.applied == 1000


def test_an_engine_queueing_at_a_full_cache_holds_at_what_it_runs() -> None:
    pilot = Autopilot()
    pilot.step(0.0, sig(), in_flight_blocks=0, queued=0)
    pilot.reset(1400)
    full = sig(waiting=4.0, kv_usage_frac=0.99)
    moves = [
        pilot.step(float(t), full, in_flight_blocks=1200, queued=9, in_flight=60)
        for t in range(1, 5)
    ]
    made = [m for m in moves if m is not None]
    assert made
    assert made[-1].new == 1200  # held at what it runs, not cut below it
    assert "4 waiting in the engine at KV 99%: holding at what it runs" in made[-1].reason


def test_heavier_mix_follows_down_at_once() -> None:
    pilot = Autopilot()
    pilot.step(0.0, sig(), in_flight_blocks=0, queued=0)
    for t in range(1, 60):  # light mix: 75 % of the footprint held -> budget above the cache
        b = pilot.applied or 1000
        pilot.step(
            float(t),
            sig(kv_usage_frac=0.75 * b / 1000),
            in_flight_blocks=b,
            queued=3,
            in_flight=b // 10,
        )
    high = pilot.applied
    assert high is not None
    assert high > 1150
    for t in range(60, 75):  # the mix turns to long prompts: nearly all of the footprint held
        b = pilot.applied or 1000
        pilot.step(
            float(t),
            sig(kv_usage_frac=min(1.0, 0.97 * b / 1000)),
            in_flight_blocks=b,
            queued=3,
            in_flight=b // 10,
        )
    assert pilot.applied is not None
    assert pilot.applied <= 1000 < high


def test_few_large_requests_get_no_overcommit_many_small_ones_do() -> None:
    # the real vLLM of scripts/real-vllm: 32 blocks, 600 + 1,000 tokens = 13 blocks a request
    assert overcommit(32, 0.69, 13.0, 0.92) < 39  # a third request would preempt at its end
    assert overcommit(2425, 0.79, 22.0, 0.92) > 1.1 * 2425  # 200/150 chat: ~1.13x the cache


def test_no_overcommit_before_any_request_has_finished() -> None:
    pilot = Autopilot()
    pilot.step(0.0, sig(), in_flight_blocks=0, queued=0)
    for t in range(1, 30):  # a burst's newcomers hold little of their footprint yet
        b = pilot.applied or 1000
        pilot.step(
            float(t),
            sig(kv_usage_frac=0.4 * b / 1000),
            in_flight_blocks=b,
            queued=40,
            in_flight=b // 10,
            turned_over=False,
        )
    assert pilot.applied == 1000


async def test_a_tenants_own_budget_refuses_sooner() -> None:
    clock = FakeClock()
    ctl = make(clock, max_concurrency=1, ttft_slo_s=30.0, queue_policy="deadline")
    ctl.tenant_ttft_slo_s = {"chat": 2.0}
    (running,) = drain_while_queued(ctl, clock, slots=1, every_s=1.0, tenant="batch")
    waiting = [ctl.enter(tenant="batch") for _ in range(3)]  # 3 ahead: ~4 s to start
    with pytest.raises(Rejected) as e:
        ctl.enter(tenant="chat")  # its own 2 s budget
    assert e.value.reason == "ttft_budget"
    assert "of 2s" in e.value.message
    later = ctl.enter(tenant="batch")  # 30 s for everyone else: queued
    assert later.queued
    for t in [*waiting, later]:
        t.cancel()
    running.release()
    accounted(ctl)


def test_tenant_budgets_parse_from_the_file_and_the_environment() -> None:
    from llmtop.errors import ConfigError
    from llmtop.settings import GatewaySettings, load

    env = {"LLMTOP_TENANT_TTFT_SLO_S": "chat=2, batch=60"}
    got = load(GatewaySettings, environ=env).tenant_ttft_slo_s
    assert got == (("chat", 2.0), ("batch", 60.0))
    table = {"gateway": {"tenant_ttft_slo_s": {"chat": 3}}}
    assert load(GatewaySettings, config=table, environ={}).tenant_ttft_slo_s == (("chat", 3.0),)
    for bad in ("chat", "chat=0", "chat=x"):
        with pytest.raises(ConfigError, match="LLMTOP_TENANT_TTFT_SLO_S"):
            load(GatewaySettings, environ={"LLMTOP_TENANT_TTFT_SLO_S": bad})


# -- unknown is not zero: the budget holds --------------------------------------------------------


def _started(clock: FakeClock) -> tuple[AdmissionController, Autopilot]:
    """A gateway in auto mode whose autopilot has made its first move (the cache's size)."""
    ctl = make(clock, mode="auto")
    pilot = Autopilot()
    drive(ctl, pilot, sig(), clock())
    assert ctl.limits.max_inflight_kv_blocks == 1000
    return ctl, pilot


@pytest.mark.parametrize("unknown", ["waiting", "preemptions", "kv_usage_frac"])
def test_a_figure_unknown_holds_the_budget_and_says_which(unknown: str) -> None:
    """Preempting hard, but the queue (or the preemptions, or the KV use) was not read: the
    budget stays where it is, and the reason names what is unknown; once it is read again,
    the controller moves."""
    clock = FakeClock()
    ctl, pilot = _started(clock)
    events = len(ctl.events)
    for _ in range(5):
        clock.advance(1.0)
        figures: dict[str, object] = {
            "preemptions": 3.0,
            "waiting": 9.0,
            "itl_s_hist": FELT,
            unknown: None,
        }
        drive(ctl, pilot, sig(**figures), clock())
    assert ctl.limits.max_inflight_kv_blocks == 1000
    assert len(ctl.events) == events
    assert ctl.autopilot is not None
    named = {"waiting": "waiting", "preemptions": "preemptions", "kv_usage_frac": "KV use"}
    assert ctl.autopilot["reason"].startswith("holding at 1,000 blocks: ")
    assert f"{named[unknown]} unknown" in ctl.autopilot["reason"]
    for _ in range(3):  # known again: a storm lasting 3 scrapes is seen (at the cache: held)
        clock.advance(1.0)
        drive(ctl, pilot, sig(preemptions=3.0, waiting=9.0, itl_s_hist=FELT), clock())
    assert ctl.limits.max_inflight_kv_blocks == 1000
    assert ctl.autopilot["reason"].startswith("holding: thrashing: preempting 3.0/s")


def test_a_scrape_that_fails_holds_the_budget_and_says_why() -> None:
    clock = FakeClock()
    ctl, pilot = _started(clock)
    for _ in range(5):
        clock.advance(1.0)
        drive(ctl, pilot, None, clock(), unread="ClientConnectorError")
    assert ctl.limits.max_inflight_kv_blocks == 1000
    assert ctl.autopilot is not None
    assert ctl.autopilot["reason"] == "upstream /metrics unreadable (ClientConnectorError): holding"


def test_a_body_without_the_queue_gauge_reads_unknown_not_empty() -> None:
    """vLLM with several API servers exports its gauges only after a first request: a body
    without `num_requests_waiting` is no queue read, not an empty queue, all the way to the
    controller."""
    text = Path("tests/fixtures/metrics-load.txt").read_text()
    lines = [ln for ln in text.splitlines() if "vllm:num_requests_waiting{" not in ln]
    scrape = read_scrape("\n".join(lines) + "\n")
    s = signals(scrape, scrape, 1.0)
    assert s.waiting is None
    assert s.kv_usage_frac_waiting is None
    assert s.preemptions == 0.0  # read: nothing happened in the interval
    clock = FakeClock()
    ctl, pilot = _started(clock)
    drive(ctl, pilot, s, clock())
    assert ctl.autopilot is not None
    assert "waiting unknown" in ctl.autopilot["reason"]


def test_the_first_scrape_gives_gauges_and_no_interval() -> None:
    text = Path("tests/fixtures/metrics-load.txt").read_text()
    first = signals(read_scrape(text), None, 1.0)
    assert first.waiting is not None
    assert first.kv_capacity_blocks is not None
    assert first.preemptions is None
    assert first.prompt_tokens is None
    assert first.ttft_s_hist is None
    assert first.ttft_p95_s is None


def test_one_replica_unread_figure_is_unknown_for_the_sum() -> None:
    """A sum that left a replica's unknown queue out would read it as empty."""
    text = Path("tests/fixtures/metrics-load.txt").read_text()
    whole = read_scrape(text)
    lines = [ln for ln in text.splitlines() if "vllm:num_requests_waiting{" not in ln]
    blind = read_scrape("\n".join(lines) + "\n")
    both = fleet_signals([(whole, whole), (blind, blind)], 1.0)
    assert both.waiting is None
    assert both.kv_capacity_blocks is not None  # what both report still adds up
    assert both.prompt_tokens == 0.0


def test_an_unknown_interval_teaches_the_footprint_nothing() -> None:
    fm = FootprintModel()
    shape = read_shape(json.dumps({"prompt": "y" * 4000}).encode())
    for _ in range(3):
        fm.admitted(shape)
        fm.learn(None, None, 16)  # the engine's count was not read: no ratio from a zero
    assert fm.ratio == 1.0
    assert fm.output_quantile is None
