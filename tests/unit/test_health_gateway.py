"""The rules over what the gateway knows of its replicas and peers (core/findings/replicas and
peers): fed its /admin/stats as the pipeline reads them, poll by poll on a fake clock, through
the same hysteresis as every rule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from llmtop.core.base.snapshot import Finding, GatewayStats, ReplicaStats, Snapshot
from llmtop.core.derive.series import CounterWindow
from llmtop.core.findings.catalog import HealthState
from llmtop.core.findings.replicas import replica_slow
from llmtop.core.health.rulebase import Context
from llmtop.core.pipeline.pipeline import gateway_stats
from llmtop.settings import HealthSettings

S = HealthSettings()
T0 = 1_790_000_000.0
A, B, C = (f"http://127.0.0.1:{p}" for p in (8001, 8002, 8003))


def rep(url: str, **kw: object) -> ReplicaStats:
    base: dict[str, object] = {"in_flight": 1, "ok": True, "share": 0.5, "state": "ok"}
    base.update(kw)
    if base["state"] != "ok":
        base["ok"] = False
    return ReplicaStats(url=url, **base)  # type: ignore[arg-type]


def gw(*replicas: ReplicaStats, **kw: object) -> GatewayStats:
    base: dict[str, object] = {
        "in_flight": 4,
        "queued": 0,
        "max_concurrency": 8,
        "ttft_p95_s": 0.3,
        "shared_status": "ok",
        "shared_live_gateways": 2,
        "shared_url": "redis://127.0.0.1:6379",
    }
    base.update(kw)
    return GatewayStats("http://127.0.0.1:9000", True, replicas=replicas, **base)  # type: ignore[arg-type]


def run(polls: Sequence[GatewayStats | None]) -> list[tuple[Finding, ...]]:
    """One poll a second; each poll's findings."""
    state = HealthState(S)
    history: list[Snapshot] = []
    out: list[tuple[Finding, ...]] = []
    for i, g in enumerate(polls):
        t = T0 + i
        ctx = Context(time=t, engines=(), gateway=g, gpus=(), settings=S, history=history)
        found = state.evaluate(ctx)
        history.append(Snapshot(time=t, gateway=g, findings=found))
        out.append(found)
    return out


def only(found: tuple[Finding, ...], fid: str) -> Finding | None:
    hits = [f for f in found if f.id == fid]
    return hits[0] if hits else None


def test_a_replica_ejected_for_garbage_is_named_at_once_with_its_error() -> None:
    healthy = gw(rep(A), rep(B))
    why = "upstream unreachable: BadHttpMessage: 400, message: Got more than 65536 bytes"
    out = gw(rep(A), rep(B, state="ejected", out_for_s=0.4, last_error=why))
    back = gw(rep(A), rep(B, back_s_ago=3.0, last_error=why))  # probed back, failing again
    later = gw(rep(A), rep(B, back_s_ago=S.replica_recent_out_s + 1, last_error=why))
    found = run([healthy] * 3 + [out, back, later])
    assert all(only(f, "replica-out-of-rotation") is None for f in found[:3])
    f = only(found[3], "replica-out-of-rotation")
    assert f is not None
    assert f.severity == "warning"
    assert f.bottleneck == "target"
    assert f.since == T0 + 3
    assert "127.0.0.1:8002 ejected for 400 ms" in f.summary
    assert why in f.summary
    assert "1 in rotation" in f.action
    f = only(found[4], "replica-out-of-rotation")
    assert f is not None
    assert "127.0.0.1:8002 back in rotation 3.0 s ago" in f.summary
    assert only(found[5], "replica-out-of-rotation") is None


def test_a_hung_replica_says_no_answer_within_the_deadline_and_none_left_is_critical() -> None:
    why = "no /health answer within 2 s (hung)"
    hung = rep(A, state="probing", out_for_s=6.0, last_error=why)
    gone = rep(B, state="ejected", out_for_s=1.0, last_error="refused")
    (found,) = run([gw(hung, gone)])
    f = only(found, "replica-out-of-rotation")
    assert f is not None
    assert f.severity == "critical"
    assert "2 of 2 replicas" in f.summary
    assert "hung or stopped" in f.action
    assert "panic routing" in f.action


def test_a_lone_replica_out_is_a_warning() -> None:
    """One engine behind the gateway still gets every request: not the fleet's outage."""
    alone = rep(A, state="ejected", out_for_s=2.0, last_error="upstream returned 500")
    (found,) = run([gw(alone)])
    f = only(found, "replica-out-of-rotation")
    assert f is not None
    assert f.severity == "warning"
    assert "only replica" in f.action


def test_an_older_gateway_without_states_says_nothing() -> None:
    old = ReplicaStats(url=A, in_flight=0, ok=False, share=None)
    (found,) = run([gw(old, rep(B))])
    assert only(found, "replica-out-of-rotation") is None


def test_a_replica_five_times_slower_is_named_with_both_rates() -> None:
    fast = {"request_tok_per_s": 190.0, "request_seconds": 4.0}
    slow = gw(rep(A, **fast), rep(B, request_tok_per_s=38.0, request_seconds=3.0))
    found = run([gw(rep(A, **fast), rep(B, **fast))] * 3 + [slow] * 4)
    assert all(only(f, "replica-slow") is None for f in found[:4])  # held to the next poll
    f = only(found[4], "replica-slow")
    assert f is not None
    assert f.bottleneck == "decode"
    assert "127.0.0.1:8002 gives 38.0 tok/s a request, 5.0x slower" in f.summary
    assert "3.0 request-seconds" in f.summary
    # 26 ms a token is inside the 100 ms ITL SLO: a heads-up
    assert f.severity == "info"
    assert f.summary.startswith("heads-up: ")
    over = gw(rep(A, **fast), rep(B, request_tok_per_s=5.0, request_seconds=3.0))
    f = only(run([over] * 2)[1], "replica-slow")
    assert f is not None
    assert f.severity == "warning"
    assert "over the ITL SLO" in f.summary


def test_a_lull_in_a_replicas_streams_keeps_its_last_rate_a_few_seconds() -> None:
    fast = {"request_tok_per_s": 190.0, "request_seconds": 4.0}
    slow = gw(rep(A, **fast), rep(B, request_tok_per_s=38.0, request_seconds=1.0))
    lull = gw(rep(A, **fast), rep(B, request_tok_per_s=None, request_seconds=0.1))
    found = run([slow, lull, lull, lull, lull])
    assert only(found[1], "replica-slow") is not None  # fired on the carried rate
    assert only(found[3], "replica-slow") is not None  # 3 s after: still carried
    history = [Snapshot(time=T0, gateway=slow)]
    for t, held in ((T0 + 3, True), (T0 + 4, False)):  # 4 s on: not known any more
        ctx = Context(time=t, engines=(), gateway=lull, gpus=(), settings=S, history=history)
        assert (replica_slow(ctx) is not None) is held


def test_a_replica_back_from_a_hang_is_not_called_slow() -> None:
    """Its answers that waited out the hang end slow: replica-out-of-rotation's, not this."""
    fast = {"request_tok_per_s": 190.0, "request_seconds": 4.0}
    back = rep(B, request_tok_per_s=15.0, request_seconds=21.6, back_s_ago=1.0)
    found = run([gw(rep(A, **fast), back)] * 3)
    assert all(only(f, "replica-slow") is None for f in found)
    # but it is the peer the other is compared with: a slow one is named beside it
    slow = rep(A, request_tok_per_s=40.0, request_seconds=2.0)
    peer = rep(B, request_tok_per_s=200.0, request_seconds=2.0, back_s_ago=3.0)
    f = only(run([gw(slow, peer)] * 2)[1], "replica-slow")
    assert f is not None
    assert "127.0.0.1:8001 gives 40.0 tok/s a request" in f.summary


def test_slow_needs_enough_streams_and_a_minority() -> None:
    few = gw(
        rep(A, request_tok_per_s=190.0, request_seconds=4.0),
        rep(B, request_tok_per_s=9.0, request_seconds=0.2),
    )
    assert all(only(f, "replica-slow") is None for f in run([few] * 5))
    even = gw(
        rep(A, request_tok_per_s=100.0, request_seconds=4.0),
        rep(B, request_tok_per_s=60.0, request_seconds=4.0),
    )
    assert all(only(f, "replica-slow") is None for f in run([even] * 5))
    three = gw(
        rep(A, request_tok_per_s=100.0, request_seconds=4.0),
        rep(B, request_tok_per_s=20.0, request_seconds=4.0),
        rep(C, request_tok_per_s=25.0, request_seconds=4.0),
    )  # one fast replica is not the pace the others are slow against
    assert all(only(f, "replica-slow") is None for f in run([three] * 5))
    four = gw(
        rep(A, request_tok_per_s=100.0, request_seconds=4.0),
        rep(B, request_tok_per_s=20.0, request_seconds=4.0),
        rep(C, request_tok_per_s=25.0, request_seconds=4.0),
        rep("http://127.0.0.1:8004", request_tok_per_s=22.0, request_seconds=4.0),
    )  # three of four under a third of the fastest: the pace of the fleet
    assert all(only(f, "replica-slow") is None for f in run([four] * 5))
    one = replace(
        three, replicas=(*three.replicas[:2], rep(C, request_tok_per_s=90.0, request_seconds=4.0))
    )
    f = only(run([one] * 4)[3], "replica-slow")
    assert f is not None
    assert "127.0.0.1:8002" in f.summary


def test_redis_away_is_named_at_once_and_says_since_when() -> None:
    ok = gw(rep(A))
    err = "redis unreachable: ConnectionError: Error 111 connecting to 127.0.0.1:6379"
    away = replace(ok, shared_status="fallback", shared_error=err)
    found = run([ok] * 2 + [away] * 5 + [ok])
    assert only(found[1], "gateway-shared-limits-lost") is None
    first = only(found[2], "gateway-shared-limits-lost")
    assert first is not None
    assert first.severity == "warning"
    assert first.since == T0 + 2
    f = only(found[6], "gateway-shared-limits-lost")
    assert f is not None
    assert "Redis at redis://127.0.0.1:6379 not answering" in f.summary
    assert "for 4.0 s (since " in f.summary
    assert err in f.summary
    assert "each of the 2 last seen admits up to 4 of max_concurrency 8" in f.summary
    assert "check Redis at redis://127.0.0.1:6379" in f.action
    assert only(found[7], "gateway-shared-limits-lost") is None


def test_a_peer_gone_from_redis_is_named_and_a_redis_restart_is_not() -> None:
    two, one = gw(rep(A)), gw(rep(A), shared_live_gateways=1)
    found = run([two] * 12 + [one] * 3 + [two])
    f = only(found[12], "gateway-peer-lost")
    assert f is not None
    assert "1 of the 2 gateways sharing limits" in f.summary
    assert f.severity == "info"  # the gateway's own TTFT inside the SLO
    assert only(found[15], "gateway-peer-lost") is None
    # after Redis came back the gateways register again one by one: not a peer lost
    away = replace(two, shared_status="fallback")
    found = run([two] * 12 + [away] * 3 + [one] + [two] * 3)
    assert all(only(f, "gateway-peer-lost") is None for f in found)
    # nor after the watched gateway itself was down (its old lease runs out its TTL)
    three = replace(two, shared_live_gateways=3)
    down = GatewayStats("http://127.0.0.1:9000", False, error="connection refused")
    found = run([two] * 12 + [down] * 3 + [three] * 2 + [two] * 3)
    assert all(only(f, "gateway-peer-lost") is None for f in found)


def test_a_draining_peer_is_named_at_once_info_unless_the_gateway_misses_its_slo() -> None:
    two = gw(rep(A), shared_draining_gateways=0)
    draining = replace(two, shared_draining_gateways=1)
    found = run([two] * 3 + [draining] * 2 + [two])
    assert only(found[2], "gateway-peer-draining") is None
    f = only(found[3], "gateway-peer-draining")  # the first poll that shows it
    assert f is not None
    assert f.severity == "info"  # a planned stop, the gateway's own TTFT inside the SLO
    assert f.summary.startswith("heads-up: 1 of 2 gateways sharing limits through Redis at ")
    assert "redis://127.0.0.1:6379 is draining (its /readyz fails; it finishes what it" in (
        f.summary
    )
    assert "its clients move to the others, http://127.0.0.1:9000 among them" in f.summary
    assert "/readyz" in f.action
    assert only(found[5], "gateway-peer-draining") is None  # gone: it stopped
    # the watched gateway's clients over the TTFT SLO meanwhile: a warning
    slow = replace(draining, ttft_p95_s=S.slo.ttft_s * 3)
    f = only(run([two, slow])[1], "gateway-peer-draining")
    assert f is not None
    assert f.severity == "warning"
    assert "over the SLO" in f.summary
    # two of three draining; none judged while Redis is away or the count unknown
    three = replace(draining, shared_live_gateways=3, shared_draining_gateways=2)
    f = only(run([three])[0], "gateway-peer-draining")
    assert f is not None
    assert "2 of 3 gateways" in f.summary
    assert "are draining (their /readyz fails; they finish what they hold)" in f.summary
    away = replace(draining, shared_status="fallback")
    unknown = replace(draining, shared_draining_gateways=None)
    assert all(only(f, "gateway-peer-draining") is None for f in run([away, unknown]))


def test_the_pipeline_reads_what_the_rules_need_from_admin_stats() -> None:
    doc = {
        "replicas": [
            {
                "url": A,
                "state": "probing",
                "in_flight": 0,
                "share": 0.5,
                "last_error": "x",
                "out_for_s": 3.5,
                "back_s_ago": None,
                "request_tok_per_s": None,
                "request_seconds": 0.0,
            },
            {
                "url": B,
                "state": "ok",
                "in_flight": 2,
                "share": 0.5,
                "last_error": None,
                "out_for_s": None,
                "back_s_ago": 2.0,
                "request_tok_per_s": 180.5,
                "request_seconds": 3.5,
            },
        ],
        "shared": {
            "backend": "redis",
            "status": "fallback",
            "url": "redis://h:6379",
            "live_gateways": 2,
            "draining_gateways": None,
            "last_error": "redis unreachable: timeout",
        },
    }
    g = gateway_stats("http://gw", doc, T0, CounterWindow(), 10.0)
    a, b = g.replicas
    assert (a.state, a.ok, a.out_for_s, a.last_error) == ("probing", False, 3.5, "x")
    assert (b.request_tok_per_s, b.request_seconds, b.back_s_ago) == (180.5, 3.5, 2.0)
    assert (g.shared_status, g.shared_url, g.shared_error) == (
        "fallback",
        "redis://h:6379",
        "redis unreachable: timeout",
    )
    assert g.shared_draining_gateways is None  # unknown while Redis is away, not 0
    ok = {**doc, "shared": {"backend": "redis", "status": "ok", "draining_gateways": 1}}
    assert gateway_stats("http://gw", ok, T0, CounterWindow(), 10.0).shared_draining_gateways == 1
