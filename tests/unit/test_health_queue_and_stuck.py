"""The two findings of issues 28.3 and 29.4 on scripted polls with a fake clock:

- gateway-queue-over-slo: requests waited in the gateway's own queue past the TTFT SLO; fires
  within the hold of the first crossing, before any 429; the action raises the cap to what the
  KV cache holds when the engine has headroom (with the arithmetic), else says add capacity or
  let the autopilot refuse early; clears when the queue is back under the SLO.
- scheduler-stuck: requests waiting, none running, KV free, no token for N seconds.
"""

from __future__ import annotations

from dataclasses import replace

from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, Snapshot
from llmtop.core.findings.catalog import HealthState
from llmtop.core.health.rulebase import Context
from llmtop.settings import HealthSettings
from tests.support.health import URL, healthy, ids
from tests.support.kvprinted import printed_fit

S = HealthSettings()


def queue(oldest: float | None, **kw: object) -> GatewayStats:
    """The gateway at cap 2 with 30 waiting since `oldest` seconds (each a little younger)."""
    ages = () if oldest is None else tuple(max(0.0, oldest - 0.1 * i) for i in range(30))
    base = GatewayStats(
        url="http://gw",
        up=True,
        in_flight=2,
        queued=30 if oldest is not None else 0,
        max_concurrency=2,
        max_queue=128,
        queue_wait_p95_s=0.0,
        rejected_per_s={},
        oldest_queued_s=oldest,
        queued_ages_s=ages,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def two_running() -> EngineStats:
    """A healthy engine running the cap's two 4,000-token prompts: 21% of 38,800 KV tokens."""
    return healthy(
        running=2,
        waiting=0,
        waiting_capacity=0,
        kv_cache_usage_frac=0.215,
        kv_block_size=16,
        mean_prompt_tokens=None,
        mean_generation_tokens=None,
        ttft_p95_s=None,
    )


def judge(polls: list[tuple[EngineStats, GatewayStats]]) -> list[dict[str, Finding]]:
    """Each poll's findings by id, one poll a second."""
    state = HealthState(S)
    history: list[Snapshot] = []
    out: list[dict[str, Finding]] = []
    for t, (e, gw) in enumerate(polls):
        ctx = Context(time=float(t), engines=(e,), gateway=gw, gpus=(), settings=S, history=history)
        found = state.evaluate(ctx)
        history.append(Snapshot(time=float(t), engines=(e,), gateway=gw, findings=found))
        out.append({f.id: f for f in found})
    return out


def test_fires_within_the_hold_of_the_first_late_request_before_any_429() -> None:
    # the burst arrives at t=0; at cap 2 the oldest waits 1 s more each poll: past 2 s at t=3
    polls = [(two_running(), queue(float(t) if t else None)) for t in range(12)]
    found = judge(polls)
    crossed = next(t for t, (_, gw) in enumerate(polls) if (gw.oldest_queued_s or 0) > 2.0)
    fired = next(t for t, f in enumerate(found) if "gateway-queue-over-slo" in f)
    assert fired - crossed == S.fire_after_s  # 3 s: within 5 s of the first late request
    f = found[fired]["gateway-queue-over-slo"]
    assert f.summary.startswith(
        "30 of 30 in the gateway's queue have waited past the TTFT SLO (2.0 s), the oldest 6.0 s"
    )
    assert "no 429 yet" in f.summary
    assert f.severity == "warning"
    assert f.bottleneck == "gateway"
    assert all("gateway-saturated" not in x for x in found)  # its quantile has not moved yet


def test_the_action_raises_the_cap_to_what_the_kv_cache_holds_with_the_arithmetic() -> None:
    found = judge([(two_running(), queue(5.0))] * 4)[-1]
    action = found["gateway-queue-over-slo"].action
    assert action.startswith(
        "the engine has KV headroom (KV 22%, 0 waiting): raise the cap from 2 to ~8: "
        "press + or :cap 8 (gateway max_concurrency); 34,920 KV tokens (90% target of 38,800) "
        "/ 4,171 tokens per request (21.5% of the cache held by 2 running now) in 16-token "
        "blocks = 8 sequences fit"
    )
    shown, said = printed_fit(action)
    assert shown == said == 8


def test_no_headroom_says_add_capacity_or_let_the_autopilot_refuse_early() -> None:
    full = healthy(kv_cache_usage_frac=0.95, waiting=6, preemptions_per_s=0.5, kv_block_size=16)
    found = judge([(full, queue(5.0, max_concurrency=16, in_flight=16))] * 4)[-1]
    action = found["gateway-queue-over-slo"].action
    assert action.startswith("the engine has no headroom (KV 95%, 6 waiting")
    assert "add capacity (replicas/GPUs)" in action
    assert "let the autopilot refuse early (press a" in action
    auto = judge([(full, queue(5.0, max_concurrency=16, mode="auto"))] * 4)[-1]
    assert "the autopilot (mode auto) already refuses" in auto["gateway-queue-over-slo"].action


def test_a_cap_at_what_the_cache_holds_is_no_headroom() -> None:
    found = judge([(two_running(), queue(5.0, max_concurrency=8, in_flight=2))] * 4)[-1]
    action = found["gateway-queue-over-slo"].action
    assert "the cap (8) is at or above the ~8 its KV cache holds" in action


def test_critical_past_four_times_the_slo_and_429s_are_named() -> None:
    late = judge([(two_running(), queue(9.0, rejected_per_s={"queue_timeout": 1.5}))] * 4)[-1]
    f = late["gateway-queue-over-slo"]
    assert f.severity == "critical"
    assert f.summary.endswith("1.5/s 429s")


def test_an_older_gateway_without_the_ages_is_judged_by_the_oldest() -> None:
    found = judge([(two_running(), queue(5.0, queued_ages_s=()))] * 4)[-1]
    assert found["gateway-queue-over-slo"].summary.startswith(
        "requests in the gateway's queue have waited past the TTFT SLO"
    )


def test_clears_after_the_hold_once_the_queue_is_back_under_the_slo() -> None:
    late = [(two_running(), queue(5.0))] * 5
    drained = [(two_running(), queue(None))] * 12
    found = judge(late + drained)
    assert "gateway-queue-over-slo" in found[4]
    cleared = next(t for t, f in enumerate(found) if t > 4 and "gateway-queue-over-slo" not in f)
    assert cleared - 5 == S.clear_after_s
    under = judge([(two_running(), queue(1.9))] * 10)
    assert all("gateway-queue-over-slo" not in f for f in under)


def stuck(**kw: object) -> EngineStats:
    base = {"running": 0, "waiting": 3, "kv_cache_usage_frac": 0.0, "decode_tok_per_s": 0}
    return healthy(**{**base, **kw})


def test_scheduler_stuck_fires_after_its_threshold_and_the_hold() -> None:
    state = HealthState(S)
    ctx = Context(time=0.0, engines=(stuck(),), gateway=None, gpus=(), settings=S)
    polls = {
        t: ids(state.evaluate(replace(ctx, time=float(t), last_progress={URL: 0.0})))
        for t in range(20)
    }
    first_held = S.scheduler_stuck_after_s
    assert polls[int(first_held + S.fire_after_s) - 1] == []
    assert polls[int(first_held + S.fire_after_s)] == ["scheduler-stuck"]
    found = state.evaluate(replace(ctx, time=20.0, last_progress={URL: 0.0}))
    assert found[0].severity == "critical"
    assert found[0].bottleneck == "target"
    assert found[0].summary == (
        "3 waiting, 0 running, KV 0% used, and no token generated in the last 20 s while its "
        "/metrics answers: the scheduler admits nothing"
    )
    assert found[0].action.startswith("restart vLLM")


def test_scheduler_stuck_needs_waiting_nothing_running_kv_free_and_no_progress() -> None:
    def held(e: EngineStats, last: float = 0.0) -> list[str]:
        state = HealthState(S)
        ctx = Context(time=0.0, engines=(e,), gateway=None, gpus=(), settings=S)
        found: list[str] = []
        for t in range(30):
            found = ids(state.evaluate(replace(ctx, time=float(t), last_progress={URL: last})))
        return found

    assert held(stuck()) == ["scheduler-stuck"]
    assert held(stuck(), last=25.0) == []  # tokens 5 s ago: not stuck yet
    assert "scheduler-stuck" not in held(stuck(running=2))  # a hang: stale-data says so
    assert held(stuck(kv_cache_usage_frac=0.95)) == []  # waiting for KV, not stuck
    assert held(stuck(waiting=0)) == []
    assert held(stuck(waiting_deferred=3)) == []  # all waiting on a LoRA or a KV transfer
    assert held(stuck(running=None)) == []  # unknown is not zero
