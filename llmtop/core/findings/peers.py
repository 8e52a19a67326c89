"""The gateways that share their limits through Redis, as the watched one sees them:
Redis away (gateway-shared-limits-lost), a peer gone (gateway-peer-lost) or draining
(gateway-peer-draining).
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.spec import AlertSpec, G, duration, gateway_over
from llmtop.core.alerts.templates import open_gateway, replica
from llmtop.core.base import format as fmt
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict, gateways_back
from llmtop.core.health.slo_policy import gateway_reading, heads_up


def _clock(t: float) -> str:
    """An epoch time as HH:MM:SS UTC (the finding's own words; the report prints dates)."""
    return fmt.utc_time(t)[11:]


def gateway_shared_limits_lost(ctx: Context) -> Verdict | None:
    """Redis, through which the gateways share their limits, does not answer the watched
    gateway: each gateway now admits up to its share (limit / gateways last seen) on its own,
    so the global cap may be exceeded (a peer that was idle gets busy) or left unused. A loss
    of control, as gateway-down is: warning, whatever the latency."""
    g = ctx.gateway
    if g is None or not g.up or g.shared_status != "fallback":
        return None
    since = ctx.time
    for t, then in gateways_back(ctx):
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


def _gateway_shared_limits_lost_alert(spec: AlertSpec) -> Alert:
    return Alert(
        f"max by ({spec.r}) ({spec.gateway(G + 'shared_fallback')}) == 1",
        f"gateway {replica(spec)}: Redis, which its limits are shared through, does not answer: "
        "each gateway admits its share on its own, so the global cap may be exceeded or left "
        "unused",
        open_gateway(spec),
        "llmtop_gateway_shared_fallback == 1",
        action="check Redis (redis-cli ping, its host and its log); the gateways rejoin at its "
        "first answer, nothing to restart",
    )


GATEWAY_SHARED_LIMITS_LOST = Definition(
    Rule(
        "gateway-shared-limits-lost",
        "warning",
        "gateway",
        gateway_shared_limits_lost,
        immediate=True,
    ),
    guide=Guide(
        "Redis, which the gateways share limits through, does not answer the watched one",
        "check Redis at its URL; until it answers each gateway admits its share on its own",
    ),
    alert=_gateway_shared_limits_lost_alert,
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
    for t, then in gateways_back(ctx):
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
        severity=reading.severity("warning"),
    )


def _gateway_peer_lost_alert(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    live = spec.gateway(G + "shared_live_gateways")
    most = gateway_over(spec, "max", "shared_live_gateways", h.peer_lookback_s)
    fell_back = gateway_over(spec, "max", "shared_fallback", h.peer_settle_s)
    answered = (
        f"min_over_time({spec.gateway('up')}[{duration(spec.at_least_interval(h.peer_settle_s))}])"
    )
    return Alert(
        f"max by ({r}) ({live}) < max by ({r}) ({most})"
        f"\nand on ({r}) max by ({r}) ({fell_back}) == 0"
        f"\nand on ({r}) min by ({r}) ({answered}) == 1",
        f"gateway {replica(spec)}: fewer gateways share the limits through Redis than in the "
        f"last {h.peer_lookback_s:g} s: a peer stopped, crashed or was rolled",
        open_gateway(spec),
        "llmtop_gateway_shared_live_gateways under its max over peer_lookback_s, with no "
        "fallback and the gateway scraped up over peer_settle_s (after either comes back the "
        "gateways register again, an old lease runs out its TTL); llmtop's severity by the "
        "gateway's TTFT against the SLO is not expressed: warning",
    )


GATEWAY_PEER_LOST = Definition(
    Rule("gateway-peer-lost", "warning", "gateway", gateway_peer_lost, immediate=True),
    advice="if it was not a planned stop (a rolling restart, a scale-down), check that gateway's "
    "process and its log; its clients need a balancer that moves them (/readyz)",
    guide=Guide(
        "fewer gateways share the limits in Redis than in the last minute (a stop, a crash)",
        "if not planned, check that gateway; its clients need a balancer reading /readyz",
    ),
    alert=_gateway_peer_lost_alert,
    reads=("peer_lookback_s", "peer_settle_s"),
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


def _gateway_peer_draining_alert(spec: AlertSpec) -> Alert:
    return Alert(
        f"max by ({spec.r}) ({spec.gateway(G + 'shared_draining_gateways')}) > 0",
        f"gateway {replica(spec)}: another gateway sharing the limits through Redis is "
        "draining (a SIGTERM: its /readyz fails, it finishes what it holds); its clients move "
        "to the others",
        open_gateway(spec),
        "llmtop_gateway_shared_draining_gateways > 0 (absent while Redis is away); llmtop's "
        "warning when the gateway's TTFT is over the SLO is not expressed: info",
        action="a planned stop (a rolling restart, a scale-down) needs nothing: the clients' "
        "balancer must read /readyz to move them; if it was not planned, find what sent the "
        "SIGTERM",
    )


GATEWAY_PEER_DRAINING = Definition(
    Rule("gateway-peer-draining", "info", "gateway", gateway_peer_draining, immediate=True),
    guide=Guide(
        "another gateway sharing the limits says in Redis it is draining (a SIGTERM: a rolling "
        "restart's first half); info, warning over the TTFT SLO",
        "nothing if planned: its clients' balancer must read /readyz; else find the SIGTERM",
    ),
    alert=_gateway_peer_draining_alert,
)

FINDINGS = (GATEWAY_SHARED_LIMITS_LOST, GATEWAY_PEER_LOST, GATEWAY_PEER_DRAINING)
