"""What the watched gateway knows of its replicas (its /admin/stats): one out of its
rotation (replica-out-of-rotation), one whose answers come far slower than its peers'
(replica-slow). The gateway has judged and timed them already, so each is named within
seconds, the same for one engine and for a fleet.
"""

from __future__ import annotations

import statistics

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.spec import AlertSpec, gateway_over
from llmtop.core.alerts.templates import open_gateway, replica
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import ReplicaStats
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict, gateways_back
from llmtop.core.health.slo_policy import heads_up, itl_reading


def _is_out(r: ReplicaStats, recent_s: float) -> bool:
    if r.state is None:
        return False  # a gateway too old to say which state: nothing to judge
    recently = r.back_s_ago is not None and r.back_s_ago <= recent_s
    return r.state != "ok" or recently


def _out_words(r: ReplicaStats) -> str:
    why = r.last_error or "no reason given"
    if r.state != "ok" and r.out_for_s is not None:
        return f"{r.url} {r.state} for {fmt.seconds(r.out_for_s)} ({why})"
    ago = fmt.seconds(r.back_s_ago)
    return f"{r.url} back in rotation {ago} ago ({why})"


def replica_out_of_rotation(ctx: Context) -> Verdict | None:
    """Replicas the gateway took out of its rotation: ejected for errors (refused, timed out,
    5xx, an answer no HTTP client reads) or for no /health answer within its deadline (a hang),
    and those back in it lately (probed back and failing again; back from a hang). Critical
    when none of several is left."""
    g = ctx.gateway
    if g is None or not g.up or not g.replicas:
        return None
    recent_s = ctx.settings.replica_recent_out_s
    out = [r for r in g.replicas if _is_out(r, recent_s)]
    if not out:
        return None
    left = sum(1 for r in g.replicas if r.state == "ok")
    now = [r for r in out if r.state != "ok"]
    back = "; ".join(_out_words(r) for r in out if r.state == "ok")
    if now:
        summary = f"{len(now)} of {len(g.replicas)} replicas out of the gateway's rotation: "
        summary += "; ".join(_out_words(r) for r in now) + (f"; lately out: {back}" if back else "")
    else:
        summary = (
            f"{len(out)} of {len(g.replicas)} replicas lately out of the gateway's rotation: {back}"
        )
    hung = any("no /health answer" in (r.last_error or "") for r in out)
    check = (
        "hung or stopped (no answer within the gateway's deadline)"
        if hung
        else "its errors in its log (crashed, restarting, answering what no client reads)"
    )
    urls = ", ".join(r.url for r in out)
    if left:
        rest = f"the gateway sends their requests to the {left} in rotation"
    elif len(g.replicas) == 1:
        rest = "it is the gateway's only replica, so it still gets every request"
    else:
        rest = "no replica is in rotation: the gateway tries them all (panic routing)"
    # one engine out is target-down's to weigh (it still gets every request); a fleet with
    # none left in rotation is the outage
    critical = not left and len(g.replicas) > 1
    return Verdict(
        summary,
        f"check {urls}: {check}; {rest} and probes /health to bring them back",
        severity="critical" if critical else "warning",
    )


def _replica_out_of_rotation_alert(spec: AlertSpec) -> Alert:
    recent = spec.health.replica_recent_out_s
    return Alert(
        f"min by ({spec.r}, replica) ({gateway_over(spec, 'min', 'replica_healthy', recent)}) == 0",
        f"gateway {replica(spec)}: replica {{{{ $labels.replica }}}} out of its rotation "
        f"(or out within the last {recent:g} s): ejected for errors, or no /health answer "
        "within its deadline",
        open_gateway(spec),
        "llmtop_gateway_replica_healthy 0 at any scrape within replica_recent_out_s; llmtop "
        "also names the replica's last error and is critical when none is left in rotation",
        action="check that replica (hung or stopped, crashed, answering what no client reads); the "
        "gateway sends its requests to the others and probes /health to bring it back",
    )


REPLICA_OUT_OF_ROTATION = Definition(
    Rule("replica-out-of-rotation", "warning", "target", replica_out_of_rotation, immediate=True),
    guide=Guide(
        "the gateway took a replica out of its rotation (errors, or no /health answer within "
        "its deadline), or it came back lately; critical with none of several left",
        "check that replica (hung, crashed, answering garbage); the others take its requests",
    ),
    alert=_replica_out_of_rotation_alert,
    reads=("replica_recent_out_s",),
)


RATE_CARRY_S = 3.0
"""A replica whose answers were too few to time at this poll keeps its rate of up to this
long ago: a lull in its traffic says nothing of its pace."""


def _timed(r: ReplicaStats, min_request_s: float) -> float | None:
    rate = r.request_tok_per_s
    return rate if rate is not None and rate > 0 and r.request_seconds >= min_request_s else None


def _token_rate(ctx: Context, r: ReplicaStats) -> float | None:
    """`r`'s token rate now, else its last within RATE_CARRY_S (None: none known, or it is
    out of rotation)."""
    least = ctx.settings.replica_slow_min_request_s
    if r.state != "ok":
        return None
    rate = _timed(r, least)
    if rate is not None:
        return rate
    for t, then in gateways_back(ctx):
        if ctx.time - t > RATE_CARRY_S:
            break
        for q in then.replicas if then is not None else ():
            if q.url == r.url:
                if (before := _timed(q, least)) is not None:
                    return before
                break
    return None


def replica_slow(ctx: Context) -> Verdict | None:
    """A replica whose answers, as the gateway timed them, come under `replica_slow_share`
    of the replicas' median rate (of the other, with two; each rate the tokens a replica's
    requests got per second over the gateway's last 1 s, running streams included, enough
    request-seconds of them): a throttled or shared GPU, a noisy neighbour. A replica back in
    rotation lately is a peer to compare with, not judged. Info while its pace is inside the
    ITL SLO, warning over it (slo_policy)."""
    g, s = ctx.gateway, ctx.settings
    if g is None or not g.up or len(g.replicas) < 2:
        return None
    timed = [(r, rate) for r in g.replicas if (rate := _token_rate(ctx, r)) is not None]
    if len(timed) < 2:
        return None
    slow = []
    fleet = statistics.median(v for _, v in timed)
    recent_s = s.replica_recent_out_s
    for r, rate in timed:
        if _is_out(r, recent_s):
            continue  # back lately: what waited out its hang ends slow (out-of-rotation's)
        # two replicas: against the other; more: against all (a fast one is not the pace)
        peers = statistics.median(v for q, v in timed if q is not r) if len(timed) == 2 else fleet
        if peers > 0 and rate < s.replica_slow_share * peers:
            slow.append((r, rate, peers))
    if not slow or len(slow) * 2 > len(timed):
        return None  # half of them slow: that is the fleet's pace, not one replica's
    r, rate, peers = min(slow, key=lambda x: x[1] / x[2])
    reading = itl_reading(ctx, 1.0 / rate, "its requests at")
    against = "the other replica" if len(timed) == 2 else "the replicas' median"
    text = (
        f"replica {r.url} gives {fmt.tok_per_s(rate)} a request, {peers / rate:.1f}x slower "
        f"than {against} {fmt.tok_per_s(peers)} (the gateway's timing of its answers over "
        f"the last 1 s, {r.request_seconds:.1f} request-seconds)"
    )
    also = [x.url for x, _, _ in slow if x is not r]
    others = f"; also {', '.join(also)}" if also else ""
    return Verdict(
        heads_up(reading, text + others),
        f"check {r.url}'s GPU (throttling, clocks, another process) and its engine's own "
        "findings; take it out of the balancer's rotation while it is this slow",
        severity=reading.severity("warning"),
    )


REPLICA_SLOW = Definition(
    Rule("replica-slow", "warning", "decode", replica_slow, fire_after_s=0.5),
    guide=Guide(
        "a replica's answers, timed by the gateway, get tokens under 1/3 of its peers' rate "
        "(over 1 s, running streams included); info inside the ITL SLO",
        "check its GPU (throttling, another process); take it out of rotation meanwhile",
    ),
    alert="the gateway times each replica's streams for /admin/stats, which llmtop reads; its "
    "/metrics has no per-replica stream rate for PromQL to compare",
)

FINDINGS = (REPLICA_OUT_OF_ROTATION, REPLICA_SLOW)
