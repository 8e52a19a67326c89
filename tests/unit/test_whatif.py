"""The what-if's pure parts: length distributions, the window, the fit, the predictor, the report.

Ground truth is a known sim profile driven in virtual time and scraped as /metrics would be
(harness/whatif_truth.py); the what-if sees only those scrapes.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from harness.whatif_truth import measure, scrape_run
from llmtop.errors import UsageError
from llmtop.gateway.admission.limits import Limits
from llmtop.sim.profiles import get_profile
from llmtop.whatif.model.calibrate import calibrate
from llmtop.whatif.model.lengths import LengthDist, from_histogram
from llmtop.whatif.model.predict import Candidate, candidates_for_caps, predict
from llmtop.whatif.model.render import bucketed_p95
from llmtop.whatif.model.scenario import State
from llmtop.whatif.model.window import Point, observe
from llmtop.whatif.service import Options, analyse, state_of
from tests.support.whatif_truths import H100

# -- lengths ----------------------------------------------------------------------------------


def test_lengths_keep_bucket_shares_and_the_exact_mean() -> None:
    # vLLM 1-2-5 buckets; 30 requests in (200, 500], 70 in (500, 1000]; mean 600.
    buckets = ((100.0, 0.0), (200.0, 0.0), (500.0, 30.0), (1000.0, 100.0), (float("inf"), 100.0))
    dist = from_histogram(buckets, 60_000.0, 100.0)
    assert dist is not None
    # Uniform buckets would mean 0.3 x 350 + 0.7 x 750 = 630: the range ends inside the top one.
    assert dist.bounds == ((200, 500), (500, 914))
    assert dist.shares == pytest.approx((0.3, 0.7))
    s = dist.sampler(random.Random(1))
    draws = [s.draw() for _ in range(40_000)]
    assert sum(draws) / len(draws) == pytest.approx(600.0, rel=0.01)
    assert sum(1 for d in draws if d <= 500) / len(draws) == pytest.approx(0.3, abs=0.01)
    assert min(draws) >= 201
    assert max(draws) <= 914


def test_lengths_cut_the_range_where_it_ends() -> None:
    """Prompts uniform on 256-1536 in vLLM's 1-2-5 buckets: the top bucket (1000, 2000] is cut
    near 1,536, so the prefill tail (the TTFT p95) is not drawn from prompts up to 2,000; a
    fixed 256-token output fills (200, 500] only to ~312; a mean above the midpoints cuts the
    bottom; a mean no single cut can reach falls back to the in-bucket exponent."""
    rng = random.Random(1)
    xs = [rng.randint(256, 1536) for _ in range(4000)]
    les = (100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, float("inf"))
    hist = tuple((le, float(sum(1 for x in xs if x <= le))) for le in les)
    dist = from_histogram(hist, float(sum(xs)), float(len(xs)))
    assert dist is not None
    assert dist.bounds[-1][1] == pytest.approx(1536, rel=0.03)
    fixed = from_histogram(((200.0, 0.0), (500.0, 50.0), (float("inf"), 50.0)), 12_800.0, 50.0)
    assert fixed is not None
    assert fixed.bounds == ((200, 312),)
    high = from_histogram(((200.0, 0.0), (500.0, 50.0), (float("inf"), 50.0)), 22_500.0, 50.0)
    assert high is not None
    assert high.bounds == ((400, 500),)
    edge = from_histogram(((200.0, 0.0), (500.0, 50.0), (float("inf"), 50.0)), 10_005.0, 50.0)
    assert edge is not None
    assert edge.bounds == ((200, 500),)
    assert edge.exponent > 10  # all at the bucket's bottom: the exponent carries it


def test_lengths_of_an_empty_histogram_are_unknown_and_fixed_is_fixed() -> None:
    assert from_histogram(((10.0, 0.0), (float("inf"), 0.0)), 0.0, 0.0) is None
    s = LengthDist.fixed(256).sampler(random.Random(0))
    assert {s.draw() for _ in range(100)} == {256}


def test_lengths_are_capped() -> None:
    s = LengthDist.fixed(900).sampler(random.Random(0), cap=500)
    assert s.draw() == 500


# -- the window and the fit -------------------------------------------------------------------


@pytest.fixture(scope="module")
def h100_points() -> list[Point]:
    return scrape_run(H100, 60.0)


def test_window_reads_capacity_rates_and_lengths(h100_points: list[Point]) -> None:
    obs = observe(h100_points)
    assert obs.kv_capacity_tokens == get_profile("h100-8b").derived_kv_tokens()
    assert obs.block_size == 16
    assert obs.arrival_source == "gateway offered"
    assert obs.arrival_per_s == pytest.approx(4.0, rel=0.2)
    assert obs.arrival_error_per_s is not None
    assert obs.arrival_error_per_s == pytest.approx(obs.arrival_per_s / obs.arrivals**0.5)
    assert obs.output_len is not None
    assert obs.output_len.mean == pytest.approx(128.0)
    assert obs.prompt_len is not None
    assert obs.prompt_len.mean == pytest.approx(896.0, rel=0.1)
    assert len(obs.intervals) == len(h100_points) - 1


def test_window_without_gateway_counts_finished_plus_change_in_the_engine(
    h100_points: list[Point],
) -> None:
    bare = [replace(p, gateway=None) for p in h100_points]
    obs = observe(bare)
    assert obs.arrival_source.startswith("engine finished")
    assert obs.arrival_per_s == pytest.approx(observe(h100_points).arrival_per_s, rel=0.25)


def test_window_refuses_what_it_cannot_read(h100_points: list[Point]) -> None:
    with pytest.raises(UsageError, match="two scrapes"):
        observe(h100_points[:1])
    with pytest.raises(UsageError, match="time order"):
        observe([h100_points[1], h100_points[0]])
    with pytest.raises(UsageError, match="went down"):
        observe([h100_points[-1], replace(h100_points[0], t=h100_points[-1].t + 1)])


def test_fit_recovers_the_hidden_profile_step_time(h100_points: list[Point]) -> None:
    cal = calibrate(observe(h100_points))
    p = get_profile("h100-8b")
    decode_floor = p.step_overhead_s + p.weight_bytes / p.effective_bandwidth
    per_prefill_token = 2 * p.params / p.effective_flops
    assert cal.fit.decode_floor_s == pytest.approx(decode_floor, rel=0.05)
    assert cal.fit.prefill_from == "fit"
    assert cal.fit.prefill_s_per_token == pytest.approx(per_prefill_token, rel=0.15)
    assert cal.kv_tokens == p.derived_kv_tokens()
    assert cal.limits == Limits(8, 128, 5.0)
    # The synthetic profile's engine coefficients are the fitted ones.
    prof = cal.profile
    assert prof.step_overhead_s + prof.weight_bytes / prof.effective_bandwidth == pytest.approx(
        cal.fit.decode_floor_s
    )
    assert 2 * prof.params / prof.effective_flops == pytest.approx(cal.fit.prefill_s_per_token)


def test_small_kv_cache_and_its_capacity_are_read() -> None:
    truth = replace(H100, profile=get_profile("seed"), kv_tokens=8000, arrival_per_s=0.8)
    cal = calibrate(observe(scrape_run(truth, 30.0)))
    assert cal.kv_tokens == 8000
    assert cal.engine_config().num_gpu_blocks == 500


# -- prediction -------------------------------------------------------------------------------


def test_prediction_is_deterministic_and_runs_off_the_calling_thread(
    h100_points: list[Point],
) -> None:
    cal = calibrate(observe(h100_points))
    cand = candidates_for_caps(cal, [4])[1]
    here = predict(cal, cand, horizon_s=20.0, warmup_s=5.0, seed=3)
    with ThreadPoolExecutor(1) as pool:
        there = pool.submit(predict, cal, cand, horizon_s=20.0, warmup_s=5.0, seed=3).result()
    assert here == there
    assert here.offered > 0


def test_candidates_keep_the_other_limits_and_no_gateway_is_a_candidate(
    h100_points: list[Point],
) -> None:
    cal = calibrate(observe(h100_points))
    cands = candidates_for_caps(cal, [2, 16])
    assert [c.label for c in cands] == ["current", "cap 2", "cap 16"]
    assert cands[1].limits == Limits(2, 128, 5.0)
    bare = predict(replace(cal, limits=None), Candidate("none", None), horizon_s=20.0)
    assert bare.rejected == 0
    assert bare.queue_wait_p95_s is None  # no gateway queue at all


def test_overload_fills_the_queue_and_times_out_with_the_real_controller(
    h100_points: list[Point],
) -> None:
    cal = calibrate(observe(h100_points))
    tight, loose = candidates_for_caps(cal, [2, 16])[1:]
    p2 = predict(cal, tight, horizon_s=30.0)
    p16 = predict(cal, loose, horizon_s=30.0)
    assert p2.rejected > 0  # 5 s queue timeout fires
    assert p2.queue_wait_p95_s is not None
    assert 4.0 < p2.queue_wait_p95_s <= 5.05
    assert p2.ttft_client_p95_s is not None
    assert p16.ttft_client_p95_s is not None
    assert p2.ttft_client_p95_s > 10 * p16.ttft_client_p95_s
    assert p2.output_tok_per_s < p16.output_tok_per_s
    assert p16.goodput_frac is not None
    assert p2.goodput_frac is not None
    assert p16.goodput_frac > p2.goodput_frac


def test_max_queue_change_is_predicted(h100_points: list[Point]) -> None:
    opts = Options(caps=(2,), max_queue=2, horizon_s=20.0, warmup_s=10.0)
    a = analyse(h100_points, opts)
    assert a.predictions[1].candidate.limits == Limits(2, 2, 5.0)
    assert a.predictions[1].queue_wait_p95_s is not None
    assert a.predictions[1].queue_wait_p95_s < 5.0  # a short queue: rejected, not timed out


@pytest.mark.slow(15)
def test_prediction_against_the_hidden_engine_in_virtual_time(
    h100_points: list[Point],
) -> None:
    """Caps 2 and 4 are over capacity at 4 req/s (throughput set by the step-time fit), 16 under
    it (set by the arrival rate, whose 60 s estimate carries ~6 % Poisson error)."""
    steady = Options(caps=(2, 4, 16), from_now=False, warmup_s=30.0, horizon_s=120.0)
    a = analyse(h100_points, steady)
    for p in a.predictions[1:]:
        assert p.candidate.limits is not None
        cap = p.candidate.limits.max_concurrency
        truth = [measure(H100, cap, 120.0, 30.0, seed) for seed in (11, 12, 13)]
        tok = sum(t.output_tok_per_s for t in truth) / 3
        ttft = sum(t.ttft_client_p95_s or 0.0 for t in truth) / 3
        assert p.output_tok_per_s == pytest.approx(tok, rel=0.10 if cap < 16 else 0.15)
        assert p.ttft_client_p95_s is not None
        assert p.ttft_client_p95_s == pytest.approx(ttft, rel=0.20 if cap < 16 else 0.5)


def test_from_now_starts_with_the_queue_and_applies_the_cap_as_patch_does(
    h100_points: list[Point],
) -> None:
    cal = calibrate(observe(h100_points))
    tight = candidates_for_caps(cal, [2])[1]
    state = State(at_engine=8, queued=40, oldest_wait_s=4.0)
    # New arrivals wait behind the 40 inherited queued requests, and the engine is busy with 8
    # from the first step: later first tokens, fewer good requests, more tokens out.
    full = predict(cal, tight, horizon_s=10.0, warmup_s=0.0, start=state)
    empty = predict(cal, tight, horizon_s=10.0, warmup_s=0.0)
    assert full.ttft_client_p50_s is not None
    assert empty.ttft_client_p50_s is not None
    assert full.ttft_client_p50_s > empty.ttft_client_p50_s
    assert full.goodput_frac is not None
    assert empty.goodput_frac is not None
    assert full.goodput_frac < empty.goodput_frac
    assert full.output_tok_per_s > empty.output_tok_per_s
    # A looser cap admits the inherited queue at once (set_limits dispatches it).
    loose = predict(cal, candidates_for_caps(cal, [64])[1], horizon_s=10.0, start=state)
    assert loose.queue_wait_p95_s is not None
    assert loose.queue_wait_p95_s < 0.5


def test_state_of_a_scrape(h100_points: list[Point]) -> None:
    last = h100_points[-1]
    gw = {**(last.gateway or {}), "queued": 10}
    s = state_of(replace(last, gateway=gw), 4.0, Limits(8, 128, 2.0))
    running = (last.engine.gauges["running"] or 0) + (last.engine.gauges["waiting"] or 0)
    assert s.at_engine == round(running)
    assert s.queued == 10
    assert s.oldest_wait_s == 2.0  # 10 / 4 req/s = 2.5 s, but the timeout is 2 s


# -- the report -------------------------------------------------------------------------------


def test_report_labels_predictions_and_shows_the_fit_error(
    h100_points: list[Point],
) -> None:
    a = analyse(h100_points, Options(caps=(4,), horizon_s=20.0))
    text = a.text()
    assert "PREDICTED" in text
    assert "fit error" in text
    assert "cap 4 (cap 4, queue 128, 5 s)" in text
    doc = json.loads(a.json())
    assert all(p["predicted"] is True for p in doc["predictions"])
    tok = doc["fit_error"][0]
    assert tok["figure"] == "output tok/s"
    assert tok["error_frac"] == pytest.approx(
        (tok["predicted"] - tok["observed"]) / tok["observed"]
    )


def test_bucketed_p95_reads_values_as_the_histogram_would() -> None:
    values = [0.01 * i for i in range(1, 101)]  # 0.01 .. 1.0
    assert bucketed_p95(values, (0.5, 1.0, float("inf"))) == pytest.approx(0.95)
    assert bucketed_p95([], (1.0,)) is None


def test_nothing_arriving_is_a_usage_error(h100_points: list[Point]) -> None:
    idle = [replace(p, gateway={**(p.gateway or {}), "offered": 0}) for p in h100_points]
    with pytest.raises(UsageError, match="no requests arrived"):
        analyse(idle, Options())


def test_caps_around_steps_from_the_current_cap_before_the_suggestions_multiples() -> None:
    from llmtop.whatif.model.render import caps_around

    assert caps_around(4, 352) == (3, 5, 8, 352)
    assert caps_around(8, 3) == (3, 7, 9, 16)
    assert caps_around(None, 6) == (3, 6, 12)
    assert caps_around(None, None) == (4, 8, 16)
