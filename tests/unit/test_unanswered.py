"""The age of what waits now (gateway) and degraded-200 firing on it before any TTFT exists."""

from __future__ import annotations

from llmtop.core.base.snapshot import EngineStats, GatewayStats
from llmtop.core.findings.catalog import HealthState
from llmtop.core.findings.degraded import degraded_200
from llmtop.core.health.rulebase import Context
from llmtop.gateway.server.unanswered import Unanswered
from llmtop.settings import HealthSettings


def test_queued_ages_from_arrival_admitted_from_admission_until_first_byte() -> None:
    u = Unanswered()
    assert (u.oldest_queued_s(10.0), u.oldest_admitted_s(10.0)) == (None, None)
    u.queued(1, arrived=1.0)
    u.queued(2, arrived=2.0)
    u.admitted(3, admitted=4.0)  # admitted at once
    assert u.oldest_queued_s(10.0) == 9.0
    assert u.oldest_admitted_s(10.0) == 6.0
    # out of the queue at 9.5: the engine's part starts then, the 8.5 s queued is not the
    # engine's delay (a capped gateway queues by design)
    u.admitted(1, admitted=9.5)
    assert u.oldest_queued_s(10.0) == 8.0
    assert u.oldest_admitted_s(10.0) == 6.0
    u.answered(1)
    u.answered(2)  # left the queue without reaching the engine (timed out, cancelled)
    assert u.oldest_queued_s(10.0) is None
    assert u.oldest_admitted_s(10.0) == 6.0


ENGINE = EngineStats(url="http://e", up=True, running=4.0, waiting=40.0, kv_cache_usage_frac=0.5)
"""A burst's first seconds: vLLM has answered nothing yet, so it has no TTFT quantile."""


def ctx(t: float, stuck: float | None) -> Context:
    gw = GatewayStats(url="http://g", up=True, oldest_unanswered_s=stuck)
    return Context(time=t, engines=(ENGINE,), gateway=gw, gpus=(), settings=HealthSettings())


def test_degraded_200_fires_on_a_stuck_request_before_any_ttft() -> None:
    assert ENGINE.ttft_p95_s is None
    assert degraded_200(ctx(0.0, 1.0)) is None  # within the 2 s SLO
    v = degraded_200(ctx(0.0, 12.0))
    assert v is not None
    assert "waited 12" in v.summary
    assert v.bottleneck == "queue"  # 40 waiting inside vLLM
    assert v.severity == "critical"  # 6x the SLO
    assert degraded_200(ctx(0.0, None)) is None  # without a gateway: the histogram only


def test_it_fires_after_the_usual_hold_time() -> None:
    state = HealthState(HealthSettings())
    fired = None
    for t in range(12):
        c = ctx(float(t), 2.5 + t)
        findings = state.evaluate(c)
        if any(f.id == "degraded-200" for f in findings):
            fired = t
            break
    assert fired == 3  # onset at 0 (2.5 s stuck > 2 s SLO), fire_after_s 3
