"""What the what-if starts from and what it reads around the engine: the arrival rate of a known
Poisson process, the gateway queue's ages, requests caught mid-decode, the API server's share of
the TTFT, and the spread one measurement may show. Pure, fake clocks, virtual time.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
import statistics
from dataclasses import replace

import pytest

from harness.whatif_truth import scrape_run, spread
from llmtop.core.vllm.scrape import EngineScrape
from llmtop.gateway.admission.controller import AdmissionController
from llmtop.gateway.admission.limits import Limits
from llmtop.gateway.admission.state import QUEUED_AGES_LISTED
from llmtop.sim.config import EngineConfig
from llmtop.sim.model import RUNNING, WAITING, Engine
from llmtop.sim.profiles import get_profile
from llmtop.whatif.model.calibrate import calibrate, frontend_overhead
from llmtop.whatif.model.predict import Candidate, predict
from llmtop.whatif.model.scenario import State, queued_ages
from llmtop.whatif.model.window import Point, observe
from llmtop.whatif.service import state_of
from tests.support.whatif_truths import H100


@pytest.fixture(scope="module")
def h100_points() -> list[Point]:
    return scrape_run(H100, 30.0)


# -- the arrival rate ---------------------------------------------------------------------------


def _scrape(template: EngineScrape, finished: int, held: int) -> EngineScrape:
    counters = {k: v for k, v in template.counters.items() if not k.startswith("finished:")}
    counters["finished:stop"] = float(finished)
    gauges = {**template.gauges, "running": float(held), "waiting": 0.0}
    return replace(template, counters=counters, gauges=gauges)


def test_arrival_rate_of_a_known_poisson_process_is_unbiased(h100_points: list[Point]) -> None:
    """3 req/s Poisson on a fake clock, each request held 2 s; 150 disjoint 60 s windows scraped
    once a second. Both estimates (the gateway's offered counter, and finished + change in the
    engine when no gateway is read) average to the true rate, and scatter by its Poisson error
    (sqrt(3 / 60) = 0.22 req/s): the real runs' 2.33-2.77 req/s of 3 offered was the load's own
    draw in those windows (its seed), not a bias of the estimate."""
    rng = random.Random(5)
    rate, hold, window, n = 3.0, 2.0, 60, 150
    arrivals: list[float] = []
    t = rng.expovariate(rate)
    while t < n * window + 1:
        arrivals.append(t)
        t += rng.expovariate(rate)
    template = h100_points[0].engine
    with_gw: list[float] = []
    without: list[float] = []
    for w in range(n):
        points = []
        for k in range(window + 1):
            now = w * window + k + 0.5
            offered = bisect.bisect_right(arrivals, now)  # arrivals are sorted: a count
            finished = bisect.bisect_right(arrivals, now - hold)
            engine = _scrape(template, finished, offered - finished)
            points.append(Point(now, engine, None, {"offered": offered}))
        with_gw.append(observe(points).arrival_per_s)
        without.append(observe([replace(p, gateway=None) for p in points]).arrival_per_s)
    se = math.sqrt(rate / window)
    for est in (with_gw, without):
        assert statistics.mean(est) == pytest.approx(rate, abs=3 * se / math.sqrt(n))
        assert statistics.stdev(est) == pytest.approx(se, rel=0.25)


# -- the gateway queue's ages -------------------------------------------------------------------


async def test_stats_list_the_queue_ages_in_admission_order() -> None:
    now = [100.0]
    ctl = AdmissionController(Limits(1, 2000, 60.0), clock=lambda: now[0])
    ctl.enter()  # admitted: not listed
    for i, prio in enumerate(("normal", "low", "normal", "high")):
        now[0] = 100.0 + i
        ctl.enter(prio)
    now[0] = 110.0
    stats = ctl.stats()
    # high first, then normal oldest first, then low
    assert stats["queued_ages_s"] == [7.0, 10.0, 8.0, 9.0]
    assert stats["queued"] == 4
    for _ in range(QUEUED_AGES_LISTED):
        ctl.enter()
    assert len(ctl.stats()["queued_ages_s"]) == QUEUED_AGES_LISTED
    await asyncio.sleep(0)


def test_state_reads_the_ages_else_the_oldest_else_estimates(h100_points: list[Point]) -> None:
    last = h100_points[-1]
    lim = Limits(8, 128, 5.0)
    gw = {**(last.gateway or {}), "queued": 3, "queued_ages_s": [4.5, 1.0, 0.2]}
    read = state_of(replace(last, gateway=gw), 4.0, lim)
    assert read.queued_ages_s == (4.5, 1.0, 0.2)
    assert read.oldest_wait_s == 4.5
    assert read.running == round(last.engine.gauges["running"] or 0)
    older = {**(last.gateway or {}), "queued": 3, "oldest_queued_s": 2.0}
    assert state_of(replace(last, gateway=older), 4.0, lim).oldest_wait_s == 2.0
    oldest = {**(last.gateway or {}), "queued": 3}
    assert state_of(replace(last, gateway=oldest), 4.0, lim).oldest_wait_s == 0.75


def test_unlisted_ages_spread_below_the_last_listed() -> None:
    assert queued_ages(State(0, 4, 8.0)) == [8.0, 6.0, 4.0, 2.0]
    assert queued_ages(State(0, 4, 9.0, queued_ages_s=(9.0, 6.0))) == [9.0, 6.0, 4.0, 2.0]
    assert queued_ages(State(0, 2, 9.0, queued_ages_s=(9.0, 6.0, 1.0))) == [9.0, 6.0]


# -- requests caught mid-decode -----------------------------------------------------------------


def test_a_resumed_request_decodes_from_where_it_was() -> None:
    cfg = EngineConfig.from_profile(get_profile("h100-8b"), kv_tokens=1600, max_num_seqs=4)
    engine = Engine(cfg)
    seq = engine.resume(500, 100, 40, arrival_s=0.0)
    assert seq.status == RUNNING
    assert (seq.num_output, seq.num_computed, seq.num_blocks) == (40, 539, 34)
    assert engine.free_blocks == cfg.num_gpu_blocks - 34
    step = engine.step()
    assert step.num_tokens == 1  # a decode token, no prefill again
    assert seq.num_output == 41
    # No room for a second one running: it waits for its prefill as a new request would.
    late = engine.resume(1500, 100, 40, arrival_s=0.0)
    assert late.status == WAITING
    assert late in engine.waiting


def test_prediction_from_a_state_with_running_requests_skips_their_prefill(
    h100_points: list[Point],
) -> None:
    cal = calibrate(observe(h100_points))
    engine_only = Candidate("no gateway", None)
    busy = State(at_engine=8, queued=0, oldest_wait_s=0.0)
    decoding = replace(busy, running=8)
    # Over the first 0.2 s: 8 decoders emit a token a step from the start; 8 requests taken
    # as new spend the first steps prefilling ~7,000 prompt tokens again.
    a = predict(cal, engine_only, horizon_s=0.2, warmup_s=0.0, start=busy, replicas=4)
    b = predict(cal, engine_only, horizon_s=0.2, warmup_s=0.0, start=decoding, replicas=4)
    assert b.output_tok_per_s > 1.2 * a.output_tok_per_s


# -- the API server's share of the TTFT ---------------------------------------------------------


def test_frontend_overhead_is_ttft_less_queue_less_prefill(h100_points: list[Point]) -> None:
    obs = observe(h100_points)
    assert frontend_overhead(obs) == 0.0  # the sim has none: within the histograms' noise
    cpu = replace(obs, ttft_mean_s=0.41, queue_time_mean_s=0.0, prefill_mean_s=0.23)
    assert frontend_overhead(cpu) == pytest.approx(0.18)
    assert calibrate(cpu).frontend_s == pytest.approx(0.18)
    cal = calibrate(obs)
    cand = Candidate("cap 8", Limits(8, 128, 5.0))
    base = predict(cal, cand, horizon_s=20.0, warmup_s=5.0)
    slow = predict(replace(cal, frontend_s=0.18), cand, horizon_s=20.0, warmup_s=5.0)
    assert base.ttft_engine_p50_s is not None
    assert slow.ttft_engine_p50_s is not None
    # Every first token comes 0.18 s later (the engine is far from full at cap 8 here).
    assert slow.ttft_engine_p50_s - base.ttft_engine_p50_s == pytest.approx(0.18, abs=0.03)
    assert slow.output_tok_per_s == pytest.approx(base.output_tok_per_s, rel=0.05)


# -- one measurement's spread -------------------------------------------------------------------


def test_spread_brackets_one_measurement_and_is_deterministic(h100_points: list[Point]) -> None:
    obs = observe(h100_points)
    cal = calibrate(obs)
    cand = Candidate("cap 2", Limits(2, 128, 5.0))
    err = obs.arrival_error_per_s or 0.0
    a = spread(cal, cand, rate_error_per_s=err, horizon_s=20.0, warmup_s=10.0, draws=6)
    b = spread(cal, cand, rate_error_per_s=err, horizon_s=20.0, warmup_s=10.0, draws=6)
    assert a == b
    assert a.draws == 6
    assert a.ttft_p95_s is not None
    lo, hi = a.ttft_p95_s
    assert 0 < lo <= hi <= 5.5  # cap 2 is over capacity: the 5 s queue timeout bounds it
    assert a.holds_ttft((lo + hi) / 2) is True
    assert a.holds_ttft(hi * 2) is False
    assert a.holds_ttft(None) is None
