"""The findings over what a gateway knows of its replicas and its peers as alerting rules,
mirroring `core.health.rules_gateway` over the gateway's own /metrics (llmtop_gateway_*).
Pure. replica-slow has none (rulesfile.NOT_EXPRESSED says why).
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.spec import AlertSpec, duration
from llmtop.core.alerts.templates import open_gateway, replica

G = "llmtop_gateway_"


def _over(spec: AlertSpec, how: str, series: str, seconds: float) -> str:
    """`how`_over_time of one of the gateway's series over `seconds` (at least one interval)."""
    look = duration(spec.at_least_interval(seconds))
    return f"{how}_over_time({spec.gateway(G + series)}[{look}])"


def replica_out_of_rotation(spec: AlertSpec) -> Alert:
    recent = spec.health.replica_recent_out_s
    return Alert(
        "replica-out-of-rotation",
        f"min by ({spec.r}, replica) ({_over(spec, 'min', 'replica_healthy', recent)}) == 0",
        f"gateway {replica(spec)}: replica {{{{ $labels.replica }}}} out of its rotation "
        f"(or out within the last {recent:g} s): ejected for errors, or no /health answer "
        "within its deadline",
        "check that replica (hung or stopped, crashed, answering what no client reads); the "
        "gateway sends its requests to the others and probes /health to bring it back",
        open_gateway(spec),
        "llmtop_gateway_replica_healthy 0 at any scrape within replica_recent_out_s; llmtop "
        "also names the replica's last error and is critical when none is left in rotation",
    )


def gateway_shared_limits_lost(spec: AlertSpec) -> Alert:
    return Alert(
        "gateway-shared-limits-lost",
        f"max by ({spec.r}) ({spec.gateway(G + 'shared_fallback')}) == 1",
        f"gateway {replica(spec)}: Redis, which its limits are shared through, does not answer: "
        "each gateway admits its share on its own, so the global cap may be exceeded or left "
        "unused",
        "check Redis (redis-cli ping, its host and its log); the gateways rejoin at its first "
        "answer, nothing to restart",
        open_gateway(spec),
        "llmtop_gateway_shared_fallback == 1",
    )


def gateway_peer_lost(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    live = spec.gateway(G + "shared_live_gateways")
    most = _over(spec, "max", "shared_live_gateways", h.peer_lookback_s)
    fell_back = _over(spec, "max", "shared_fallback", h.peer_settle_s)
    answered = (
        f"min_over_time({spec.gateway('up')}[{duration(spec.at_least_interval(h.peer_settle_s))}])"
    )
    return Alert(
        "gateway-peer-lost",
        f"max by ({r}) ({live}) < max by ({r}) ({most})"
        f"\nand on ({r}) max by ({r}) ({fell_back}) == 0"
        f"\nand on ({r}) min by ({r}) ({answered}) == 1",
        f"gateway {replica(spec)}: fewer gateways share the limits through Redis than in the "
        f"last {h.peer_lookback_s:g} s: a peer stopped, crashed or was rolled",
        "if it was not a planned stop (a rolling restart, a scale-down), check that gateway's "
        "process and its log; its clients need a balancer that moves them (/readyz)",
        open_gateway(spec),
        "llmtop_gateway_shared_live_gateways under its max over peer_lookback_s, with no "
        "fallback and the gateway scraped up over peer_settle_s (after either comes back the "
        "gateways register again, an old lease runs out its TTL); llmtop's severity by the "
        "gateway's TTFT against the SLO is not expressed: warning",
    )


def gateway_peer_draining(spec: AlertSpec) -> Alert:
    return Alert(
        "gateway-peer-draining",
        f"max by ({spec.r}) ({spec.gateway(G + 'shared_draining_gateways')}) > 0",
        f"gateway {replica(spec)}: another gateway sharing the limits through Redis is "
        "draining (a SIGTERM: its /readyz fails, it finishes what it holds); its clients move "
        "to the others",
        "a planned stop (a rolling restart, a scale-down) needs nothing: the clients' balancer "
        "must read /readyz to move them; if it was not planned, find what sent the SIGTERM",
        open_gateway(spec),
        "llmtop_gateway_shared_draining_gateways > 0 (absent while Redis is away); llmtop's "
        "warning when the gateway's TTFT is over the SLO is not expressed: info",
    )


GATEWAY_ALERTS = (
    replica_out_of_rotation,
    gateway_shared_limits_lost,
    gateway_peer_lost,
    gateway_peer_draining,
)
