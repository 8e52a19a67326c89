"""The incident timeline: what changed between two snapshots, computed once, for the TUI's event
log, the headless demo's timeline and the report. `incidents(prev, cur)`, at `cur.time`: findings
fired (`cur`'s order) and cleared (`prev`'s), engines down / up / restarted, gateway limits
changed (`admin_api.LIMITS` order), admission paused / resumed, the gateway down / up. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from llmtop.core.base.admin_api import LIMIT_FIELDS, PAUSED
from llmtop.core.base.snapshot import Finding, GatewayStats, Snapshot

IncidentKind = Literal[
    "finding_fired",
    "finding_cleared",
    "limit_changed",
    "paused",
    "resumed",
    "target_down",
    "target_up",
    "engine_restarted",
]
GATEWAY = "gateway"
"""The subject of a gateway's target_down / target_up."""


@dataclass(frozen=True)
class Incident:
    """One thing that changed between two polls, stamped with the later poll's time."""

    time: float
    kind: IncidentKind
    subject: str
    """The finding id, the limit's field ("paused" for pause/resume), or the target: an
    engine URL or GATEWAY."""
    finding: Finding | None = None
    """The finding as it fired, or as it last showed before it cleared."""
    old: Any = None
    new: Any = None
    """A limit's or the paused flag's values; an engine's version@model when it restarted."""
    detail: str | None = None
    """Why a target went down, in the user's words."""


def gateway_changes(prev: GatewayStats, cur: GatewayStats, t: float) -> list[Incident]:
    """Limits that differ between two answers of a gateway, then pause or resume (both known)."""
    out = [
        Incident(t, "limit_changed", name, old=getattr(prev, name), new=getattr(cur, name))
        for name in LIMIT_FIELDS
        if getattr(prev, name) != getattr(cur, name)
    ]
    if prev.paused is not None and cur.paused is not None and prev.paused != cur.paused:
        kind: IncidentKind = "paused" if cur.paused else "resumed"
        out.append(Incident(t, kind, PAUSED, old=prev.paused, new=cur.paused))
    return out


def _identity(version: str | None, model: str | None) -> str:
    return f"{version or '?'}@{model or '?'}"


def _differ(a: str | None, b: str | None) -> bool:
    """Both known and different (a value that appears or goes is not a change)."""
    return a is not None and b is not None and a != b


def incidents(prev: Snapshot | None, cur: Snapshot) -> list[Incident]:
    """Everything that changed from `prev` to `cur` (prev None: the first poll, every finding
    fires and nothing else is known to have changed)."""
    t = cur.time
    before = {f.id: f for f in prev.findings} if prev is not None else {}
    after = {f.id for f in cur.findings}
    out = [
        Incident(t, "finding_fired", f.id, finding=f) for f in cur.findings if f.id not in before
    ]
    out += [
        Incident(t, "finding_cleared", fid, finding=f)
        for fid, f in before.items()
        if fid not in after
    ]
    if prev is None:
        return out
    engines_before = {e.url: e for e in prev.engines}
    for e in cur.engines:
        old = engines_before.get(e.url)
        if old is None:
            continue
        if old.up and not e.up:
            out.append(Incident(t, "target_down", e.url, detail=e.error or "no answer"))
        elif not old.up and e.up:
            out.append(Incident(t, "target_up", e.url))
        elif old.up and e.up and (_differ(old.version, e.version) or _differ(old.model, e.model)):
            # a new version or model behind the same URL: the engine was restarted
            was, now = _identity(old.version, old.model), _identity(e.version, e.model)
            out.append(Incident(t, "engine_restarted", e.url, old=was, new=now))
        elif e.restarted_at is not None and e.restarted_at != old.restarted_at:
            # the same version and model, its counters went back: restarted all the same
            same = _identity(e.version, e.model)
            detail = "its counters went back"
            out.append(Incident(t, "engine_restarted", e.url, old=same, new=same, detail=detail))
    pg, cg = prev.gateway, cur.gateway
    if pg is not None and cg is not None and pg.up and cg.up:
        out += gateway_changes(pg, cg, t)
    elif pg is not None and cg is not None and pg.up != cg.up:
        if cg.up:
            out.append(Incident(t, "target_up", GATEWAY))
        else:
            out.append(Incident(t, "target_down", GATEWAY, detail=cg.error or "no answer"))
    return out


def timeline(snapshots: Sequence[Snapshot]) -> Iterator[Incident]:
    """The incidents of a run, in time order (the first poll's findings fire)."""
    if not snapshots:
        return
    yield from incidents(None, snapshots[0])
    for a, b in pairwise(snapshots):
        yield from incidents(a, b)
