"""Health rules over what the watched gateway knows of its replicas and of the gateways it
shares limits with (its /admin/stats): a replica out of its rotation, a replica whose answers
come far slower than its peers', Redis away (the limits held per gateway), a peer gone or
draining. Pure. The gateway has already judged and timed what they read, so each is named
within seconds, the same for one engine and for a fleet.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import GatewayStats, ReplicaStats
from llmtop.core.health.rulebase import Context, Verdict
from llmtop.core.health.slo_policy import gateway_reading, heads_up, itl_reading


def _clock(t: float) -> str:
    """An epoch time as HH:MM:SS UTC (the finding's own words; the report prints dates)."""
    return fmt.utc_time(t)[11:]


def _gateways_back(ctx: Context) -> Iterator[tuple[float, GatewayStats | None]]:
    """The watched gateway at each earlier poll, newest first (None: none watched then)."""
    for snap in reversed(ctx.history):
        yield snap.time, snap.gateway


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
    for t, then in _gateways_back(ctx):
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


def gateway_shared_limits_lost(ctx: Context) -> Verdict | None:
    """Redis, through which the gateways share their limits, does not answer the watched
    gateway: each gateway now admits up to its share (limit / gateways last seen) on its own,
    so the global cap may be exceeded (a peer that was idle gets busy) or left unused. A loss
    of control, as gateway-down is: warning, whatever the latency."""
    g = ctx.gateway
    if g is None or not g.up or g.shared_status != "fallback":
        return None
    since = ctx.time
    for t, then in _gateways_back(ctx):
        if then is None or not then.up:
            continue
        if then.shared_status != "fallback":
            break
        since = t
    url = g.shared_url or "its --redis URL"
    live = g.shared_live_gateways or 1
    cap = g.max_concurrency
    share = f"{max(1, cap // live)} of max_concurrency {cap}" if cap is not None else "its share"
    why = f": {g.shared_error}" if g.shared_error else ""
    lasted = f"for {fmt.seconds(ctx.time - since)} " if ctx.time > since else ""
    return Verdict(
        f"Redis at {url} not answering gateway {g.url} {lasted}(since {_clock(since)}){why}; "
        f"the limits are per gateway now: each of the {live} "
        f"last seen admits up to {share} on its own, so the global cap may be exceeded or "
        "left unused",
        f"check Redis at {url} (redis-cli -u {url} ping, its host and its log); the gateways "
        "rejoin at its first answer, nothing to restart",
    )


def gateway_peer_lost(ctx: Context) -> Verdict | None:
    """Fewer gateways share the limits through Redis than the most seen over
    `peer_lookback_s`: a peer stopped, crashed or was rolled (its lease given back or run
    out). Not judged until Redis and the watched gateway have answered `peer_settle_s`: after
    either comes back, the gateways register again and an old lease runs out its TTL. Severity
    by the watched gateway's own TTFT against the SLO: its clients may be the peer's now."""
    g, s = ctx.gateway, ctx.settings
    live = g.shared_live_gateways if g is not None and g.up else None
    if g is None or live is None or g.shared_status != "ok":
        return None
    most, last_seen = live, None
    for t, then in _gateways_back(ctx):
        age = ctx.time - t
        if age > s.peer_lookback_s:
            break
        settled = then is not None and then.up and then.shared_status == "ok"
        if not settled and age <= s.peer_settle_s:
            return None
        seen = then.shared_live_gateways if then is not None and settled else None
        if seen is not None and seen > live and seen >= most:
            most = seen
            last_seen = last_seen or t
    if most <= live or last_seen is None:
        return None
    gone = most - live
    reading = gateway_reading(ctx)
    text = (
        f"{gone} of the {most} gateways sharing limits through Redis at "
        f"{g.shared_url or '?'} gone (more than {live} last seen at {_clock(last_seen)}): "
        f"{live} left, "
        f"{g.url} among them (a lease given back at a stop, or run out after a crash)"
    )
    return Verdict(
        heads_up(reading, text),
        "if it was not a planned stop (a rolling restart, a scale-down), check that gateway's "
        "process and its log; its clients need a balancer that moves them (/readyz)",
        severity=reading.severity("warning"),
    )


def gateway_peer_draining(ctx: Context) -> Verdict | None:
    """Gateways sharing the limits through Redis whose records say they are draining (a
    SIGTERM: their /readyz fails, they finish what they hold, then give their lease back):
    the first half of a rolling restart or a scale-down, named at the first poll that shows
    it, where gateway-peer-lost names only a peer that stays gone. Info, a planned stop;
    warning when the watched gateway's own TTFT is over the SLO (its clients may be the
    peer's now)."""
    g = ctx.gateway
    n = g.shared_draining_gateways if g is not None and g.up else None
    if g is None or not n or g.shared_status != "ok":
        return None
    live = max(g.shared_live_gateways or 0, n + 1)
    one = n == 1
    reading = gateway_reading(ctx)
    text = (
        f"{n} of {live} gateways sharing limits through Redis at {g.shared_url or '?'} "
        f"{'is' if one else 'are'} draining ({'its' if one else 'their'} /readyz fails; "
        f"{'it finishes what it holds' if one else 'they finish what they hold'}); "
        f"{'its' if one else 'their'} clients move to the others, {g.url} among them"
    )
    return Verdict(
        heads_up(reading, text),
        "a planned stop (a rolling restart, a scale-down) needs nothing: its clients' balancer "
        "must read /readyz to move them; if it was not planned, find what sent the SIGTERM "
        "(the orchestrator's events); gateway-peer-lost names it if it does not come back",
        severity="warning" if reading.state == "missed" else "info",
    )
