"""Pure view logic of the TUI: what the badge says, where the queue is, what changed.

No textual import here, so it is tested without a screen. The app turns each Snapshot into a
`View` (one immutable value the panels render) and words the incidents between consecutive
snapshots (core.output.incidents) as `LogEvent`s; several engines are combined by
core.derive.aggregate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Finding, FleetSnapshot, GatewayStats, Snapshot
from llmtop.core.dialects.catalog import described
from llmtop.core.health.kvsize import KV_TARGET_FRAC
from llmtop.core.output.incidents import GATEWAY, incidents
from llmtop.tui.view.commands import label_of

KV = "max_inflight_kv_blocks"

Badge = Literal["OK", "DEGRADED", "CRITICAL", "DOWN", "UNKNOWN"]
EventKind = Literal["fired", "cleared", "limit", "change", "error", "info"]

_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def engine_label(e: EngineStats | None) -> str | None:
    """The engine as the header names it: "vLLM 0.32.0", "llama.cpp b6000", "SGLang"."""
    if e is None or not e.up or (e.engine is None and not e.version):
        return None
    return " ".join(x for x in (described(e.engine)[0] if e.engine else None, e.version) if x)


@dataclass(frozen=True)
class LogEvent:
    """One line of the incident timeline."""

    time: float
    kind: EventKind
    text: str


@dataclass(frozen=True)
class View:
    """Everything the panels render for one moment; built by the app, read by widgets."""

    snapshot: Snapshot
    engine: EngineStats | None
    """The engines combined (one engine as is); None when no engine is configured."""
    age_s: float | None
    stale: bool
    interval_s: float
    ttft_slo_s: float
    itl_slo_s: float
    queue_wait_slo_s: float
    read_only: bool = False
    poll_error: str | None = None
    history: tuple[Snapshot, ...] = field(default=(), compare=False)
    kv_target_frac: float = KV_TARGET_FRAC
    """The share of the KV cache the panel's "fits" fills, as the findings' (HealthSettings)."""


def badge(snapshot: Snapshot, *, stale: bool = False) -> Badge:
    """OK / DEGRADED / CRITICAL / DOWN: DOWN when no engine answers, else the health status."""
    if snapshot.engines and not any(e.up for e in snapshot.engines):
        return "DOWN"
    if any(f.id == "target-down" for f in snapshot.findings):
        return "DOWN"
    if snapshot.status == "ok":
        return "DEGRADED" if stale else "OK"
    if snapshot.status == "degraded":
        return "DEGRADED"
    if snapshot.status == "critical":
        return "CRITICAL"
    return "UNKNOWN"


def is_stale(age_s: float | None, interval_s: float) -> bool:
    """Data older than two intervals is stale (a poll is hanging or failing)."""
    return age_s is not None and age_s > 2.0 * interval_s


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first, then the oldest first (it has held longest)."""
    return sorted(
        findings,
        key=lambda f: (_SEVERITY_RANK.get(f.severity, 2), f.since if f.since is not None else 0.0),
    )


def shown_findings(snapshot: Snapshot) -> list[Finding]:
    """The findings panel's order: `sorted_findings`; for a fleet, within one severity the
    fleet's own findings (replica-down, replica-outlier, load-imbalance) come before a single
    replica's, whose findings are also on its row of the replica table. A replica's critical
    still leads a fleet warning, so the badge and the first finding agree."""
    if isinstance(snapshot, FleetSnapshot) and snapshot.fleet is not None:
        own = {f.id for f in snapshot.fleet.findings}
        return sorted(
            snapshot.findings,
            key=lambda f: (
                _SEVERITY_RANK.get(f.severity, 2),
                f.id not in own,
                f.since if f.since is not None else 0.0,
            ),
        )
    return sorted_findings(snapshot.findings)


def queue_location(engine: EngineStats | None, gateway: GatewayStats | None) -> str:
    """One phrase saying where requests wait: the answer the Sequences panel leads with."""
    waiting = engine.waiting if engine is not None and engine.up else None
    queued = gateway.queued if gateway is not None and gateway.up else None
    if waiting is None and queued is None:
        return "queue: n/a"
    w, q = waiting or 0.0, float(queued or 0)
    if w <= 0 and q <= 0:
        return "no queue"
    if w > 0 and q > 0:
        return "queue in BOTH engine and gateway"
    if w > 0:
        return "queue in the ENGINE"
    return "queue in the GATEWAY"


def scaleout_text(g: GatewayStats) -> str:
    """The gateway panel's title tail past one engine and one process: each replica's in
    flight (x: out of service) and the shared limits ("redis 6/8×3", or FALLBACK); empty for
    one gateway in front of one engine."""
    parts: list[str] = []
    if len(g.replicas) > 1:
        parts.append(
            "|".join(
                f"{'?' if r.in_flight is None else r.in_flight}{'' if r.ok else 'x'}"
                for r in g.replicas
            )
        )
    if g.shared_status == "fallback":
        parts.append("REDIS FALLBACK")
    elif g.shared_status is not None:
        held = "?" if g.global_in_flight is None else str(g.global_in_flight)
        cap = "?" if g.max_concurrency is None else str(g.max_concurrency)
        parts.append(f"redis {held}/{cap}×{g.shared_live_gateways or '?'}")
    return " ".join(parts)


def advice_text(g: GatewayStats) -> str | None:
    """In mode advise, what the autopilot would set and why (its status' reason: "would set KV
    budget 3,100 blocks, prefill 4,136 tokens: ..."); None in the other modes."""
    if g.mode != "advise":
        return None
    return g.autopilot_reason or "the autopilot is reading the engine: no suggestion yet"


def deadline_text(g: GatewayStats, slo_ttft_s: float) -> list[tuple[str, bool]]:
    """The gateway panel's SLO line as (text, needs a look) pieces, the most important first:
    the SLO the gateway read (and this screen's, when another), admission's override of it (a
    live `slo`), what a request may wait of it (the deadline queue: the budget less the
    engine's own TTFT, the margin) and the tenants' overrides (admission only). Empty for a
    fifo gateway that reads the SLO this screen judges by."""
    gw = g.slo_ttft_s
    if gw is None:  # a gateway too old to say
        return []
    pieces = [(f"slo {fmt.dur(gw)}", False)]
    if abs(gw - slo_ttft_s) > 1e-9:
        pieces.append((f" ≠ {fmt.dur(slo_ttft_s)} here", True))
    if g.ttft_slo_s != gw:
        admit = "off" if g.ttft_slo_s is None else fmt.dur(g.ttft_slo_s)
        pieces.append((f"  admission {admit} (override)", True))
    if g.queue_budget_s is not None:
        pieces.append((f"  wait ≤{fmt.dur(g.queue_budget_s)}", False))
        pieces.append((f" (engine {fmt.dur(g.engine_ttft_s or 0.0)})", False))
    if g.tenant_ttft_slo_s:
        n = len(g.tenant_ttft_slo_s)
        pieces.append((f"  {n} tenant override{'s' if n > 1 else ''}", False))
    return pieces if len(pieces) > 1 else []


def limit_text(name: str, value: object) -> str:
    """A limit's value as shown in the log and the gateway panel (off for None)."""
    if value is None:
        return "off"
    if name == "queue_timeout_s" and isinstance(value, int | float):
        return f"{value:g}s" if float(value) >= 1 else fmt.dur(float(value))
    if isinstance(value, float) and value.is_integer():
        return f"{value:.0f}"
    return str(value)


def diff_events(prev: Snapshot | None, cur: Snapshot) -> list[LogEvent]:
    """The event log's lines for what changed between two polls (core.output.incidents): findings
    fired (most severe first) and cleared, targets down/up, engines restarted, limits, pause."""
    found = incidents(prev, cur)
    t = cur.time
    fired = sorted_findings(i.finding for i in found if i.kind == "finding_fired" and i.finding)
    out = [LogEvent(t, "fired", f"{f.severity} {f.id}: {f.summary}") for f in fired]
    cleared = sorted(i.subject for i in found if i.kind == "finding_cleared")
    out += [LogEvent(t, "cleared", f"cleared {fid}") for fid in cleared]
    g = cur.gateway
    reason = g.autopilot_reason if g is not None and g.mode == "auto" else None
    changes = [
        f"{label_of(i.subject)} {limit_text(i.subject, i.old)} -> {limit_text(i.subject, i.new)}"
        + (f" (autopilot: {reason.split(': ', 1)[-1]})" if reason and i.subject == KV else "")
        for i in found
        if i.kind == "limit_changed"
    ]
    for i in found:
        where = "gateway" if i.subject == GATEWAY else f"engine {i.subject}"
        if i.kind == "target_down":
            out.append(LogEvent(t, "error", f"{where} down: {i.detail}"))
        elif i.kind == "target_up":
            out.append(LogEvent(t, "info", f"{where} back up"))
        elif i.kind == "engine_restarted":
            how = f" ({i.detail})" if i.detail else ""
            out.append(LogEvent(t, "info", f"{where} restarted{how}: {i.old} -> {i.new}"))
        elif i.kind == "limit_changed" and changes:
            out.append(LogEvent(t, "limit", "limits: " + ", ".join(changes)))
            changes = []
        elif i.kind in ("paused", "resumed"):
            text = "admission PAUSED" if i.kind == "paused" else "admission resumed"
            out.append(LogEvent(t, "limit", text))
    if isinstance(cur, FleetSnapshot) and cur.fleet is not None:  # replica restarts
        after = prev.time if prev is not None else t - 1e-9
        out += [LogEvent(e.time, "info", e.summary) for e in cur.fleet.events if e.time > after]
    return out


RESTART_BADGE_S = 60.0
"""How long the header says an engine restarted (engine-restarted's restart_note_s)."""


def engine_badges(e: EngineStats | None, now: float) -> list[tuple[str, str]]:
    """The header's words for the engine's own state: asleep, unhealthy, restarted lately."""
    if e is None or not e.up:
        return []
    out = []
    if e.sleep_state not in (None, "awake"):
        out.append(("ASLEEP", "bold reverse yellow"))
    if e.healthy is False:
        out.append(("UNHEALTHY", "bold reverse red"))
    if e.restarted_at is not None and 0 <= now - e.restarted_at <= RESTART_BADGE_S:
        out.append((f"RESTARTED {now - e.restarted_at:.0f}s", "bold reverse yellow"))
    return out


def header_target(snapshot: Snapshot) -> str:
    """The target as the header shows it: host:port of the engine(s)."""
    if isinstance(snapshot, FleetSnapshot) and snapshot.fleet is not None:
        totals = snapshot.fleet.totals
        return f"fleet of {totals.replicas} replicas, {totals.up} up"
    urls = [e.url for e in snapshot.engines]
    if not urls:
        return "no engine"
    first = urls[0].split("://", 1)[-1].rstrip("/")
    return first if len(urls) == 1 else f"{first} +{len(urls) - 1}"
