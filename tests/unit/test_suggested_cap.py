"""`suggested_cap`: the cap the findings tell the user to type, read from the rules' own actions
(what the demo's line and `--apply-cap auto` apply)."""

from __future__ import annotations

from dataclasses import replace

from llmtop.core.base.snapshot import GatewayStats
from llmtop.core.health.rulebase import suggested_cap
from tests.support.health import healthy, run

UNCAPPED = GatewayStats(url="http://gw", up=True, max_concurrency=256, in_flight=8, queued=0)
FULL = healthy(running=8, kv_cache_usage_frac=0.97, preemptions_per_s=0.3, ttft_p95_s=0.5)


def test_the_kv_findings_cap_is_what_its_action_says() -> None:
    findings = run([(FULL, UNCAPPED, ())] * 5)[-1]
    kv = next(f for f in findings if f.id == "kv-exhausted")
    advice = suggested_cap(findings)
    assert advice is not None
    n, f = advice
    assert f is kv
    # 38,800 tokens / (1,000 + 300) per request in 16-token blocks: what the summary shows
    assert f"= {n} sequences fit" in kv.summary
    assert f"press - or :cap {n} " in kv.action


def test_no_cap_when_the_gateway_is_already_at_or_below_it() -> None:
    capped = replace(UNCAPPED, max_concurrency=7, in_flight=7, queued=20)  # 7 fit (held)
    findings = run([(FULL, capped, ())] * 5)[-1]
    assert "kv-exhausted" in {f.id for f in findings}
    assert suggested_cap(findings) is None


def test_no_cap_when_traffic_goes_around_the_gateway() -> None:
    around = replace(UNCAPPED, max_concurrency=3, in_flight=0)
    findings = run([(FULL, around, ())] * 5)[-1]
    assert "kv-exhausted" in {f.id for f in findings}
    assert suggested_cap(findings) is None


def test_none_on_a_healthy_engine() -> None:
    findings = run([(healthy(), UNCAPPED, ())] * 5)[-1]
    assert findings == ()
    assert suggested_cap(findings) is None


def test_the_most_severe_advice_leads() -> None:
    over = replace(FULL, ttft_p95_s=3.0)  # users miss the SLO: kv-exhausted is critical
    findings = run([(over, UNCAPPED, ())] * 5)[-1]
    kv = next(f for f in findings if f.id == "kv-exhausted")
    # the same advice under a warning with a smaller number must not win over the critical one
    warning = replace(
        kv, id="other", severity="warning", action=kv.action.replace(":cap", ":cap 1")
    )
    advice = suggested_cap([warning, kv])
    assert advice is not None
    assert advice[1] is kv
