"""The arithmetic of a load run: SLO verdicts, goodput, arrivals, flag parsing (its percentiles:
tests/unit/test_percentiles.py)."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from llmtop.errors import UsageError
from llmtop.load.stats import (
    RequestResult,
    Slo,
    format_table,
    interarrivals,
    parse_prompt_tokens,
    summarize,
    to_json,
    verdict,
)


def ok(ttft: float, gaps: tuple[float, ...] = (0.03, 0.03), **kw: object) -> RequestResult:
    e2e = ttft + sum(gaps)
    return RequestResult(
        offered_at_s=0.0,
        outcome="ok",
        status=200,
        ttft_s=ttft,
        itl_s=gaps,
        e2e_s=e2e,
        elapsed_s=e2e,
        prompt_tokens=100,
        output_tokens=len(gaps) + 1,
        **kw,  # type: ignore[arg-type]
    )


def test_parse_prompt_tokens() -> None:
    assert parse_prompt_tokens("512") == (512, 512)
    assert parse_prompt_tokens("100:2000") == (100, 2000)
    for bad in ("0", "x", "5:3", "1:y"):
        with pytest.raises(UsageError, match="--prompt-tokens"):
            parse_prompt_tokens(bad)


def test_verdict_judges_ttft_tpot_and_outcome() -> None:
    slo = Slo(ttft_s=1.0, itl_s=0.05)
    assert verdict(ok(0.5), slo) is True
    assert verdict(ok(1.5), slo) is False
    assert verdict(ok(0.5, gaps=(0.02, 0.2)), slo) is False  # mean gap 0.11 > 0.05
    assert verdict(ok(0.5, gaps=()), slo) is True  # one token: no ITL to judge
    rejected = RequestResult(0.0, "rejected", status=429, rejections=1)
    assert verdict(rejected, slo) is False
    assert verdict(RequestResult(0.0, "error", error="connect: refused"), slo) is False
    assert verdict(ok(0.5), Slo(None, None, e2e_s=0.01)) is False


def test_cut_requests_are_judged_only_once_they_have_missed() -> None:
    slo = Slo(ttft_s=2.0, itl_s=None)
    young = RequestResult(0.0, "cut", elapsed_s=0.5)
    starved = RequestResult(0.0, "cut", elapsed_s=5.0)
    late = RequestResult(0.0, "cut", ttft_s=3.0, elapsed_s=4.0)
    streaming = RequestResult(0.0, "cut", ttft_s=0.2, elapsed_s=4.0)
    assert verdict(young, slo) is None
    assert verdict(starved, slo) is False
    assert verdict(late, slo) is False
    assert verdict(streaming, slo) is None


def test_summary_counts_goodput_per_offered_request() -> None:
    slo = Slo(ttft_s=1.0, itl_s=0.1)
    results = [
        ok(0.2),
        ok(0.4),
        ok(3.0),  # too slow
        RequestResult(
            0.0,
            "rejected",
            status=429,
            rejections=2,
            retry_after_given=2,
            retry_after_honoured=1,
            reject_reason="queue_full",
        ),
        RequestResult(0.0, "http_error", status=500, error="http 500: boom"),
        RequestResult(0.0, "cut", elapsed_s=0.1),  # not judged
    ]
    s = summarize(results, wall_s=10.0, slo=slo)
    assert (s.offered, s.ok, s.rejected, s.errors, s.cut) == (6, 3, 1, 1, 1)
    assert s.judged == 5
    assert s.good == 2
    assert s.goodput_frac == pytest.approx(2 / 5)
    assert s.rejections_429 == 2
    assert (s.retry_after_given, s.retry_after_honoured) == (2, 1)
    assert s.reject_reasons == {"queue_full": 1}
    assert s.status_codes == {"200": 3, "429": 1, "500": 1, "none": 1}
    assert s.ttft.count == 3
    assert s.ttft.p50 == pytest.approx(0.4)
    assert s.itl.count == 6
    assert s.request_per_s == pytest.approx(0.3)
    table = format_table(s)
    assert "goodput    40% of 5 judged" in table
    assert "queue_full" in table
    doc = to_json(s)
    json.dumps(doc)  # serialisable
    assert doc["goodput_frac"] == pytest.approx(0.4)
    assert doc["ttft"]["p50_s"] == pytest.approx(0.4)


def test_empty_run_is_unknown_not_zero() -> None:
    s = summarize([], wall_s=0.0, slo=Slo())
    assert s.goodput_frac is None
    assert s.ttft.p95 is None
    assert s.request_per_s is None
    assert "n/a" in format_table(s)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_interarrivals_have_the_asked_mean_and_spread(burstiness: float) -> None:
    gaps = interarrivals(4000, rate_per_s=10.0, burstiness=burstiness, rng=random.Random(1))
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean
    assert mean == pytest.approx(0.1, rel=0.1)
    # Gamma with shape k has a coefficient of variation of 1/sqrt(k).
    assert cv == pytest.approx(burstiness**-0.5, rel=0.15)


def test_interarrivals_reject_nonsense() -> None:
    with pytest.raises(UsageError):
        interarrivals(3, 0.0, 1.0, random.Random(0))
