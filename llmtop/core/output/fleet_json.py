"""A `Fleet` as the "fleet" object of `llmtop snapshot --json` (docs/fleet.md). Pure.

Every replica with its own figures (the keys of an engine in the snapshot) and findings, worst
first, data-parallel engines right after their server; the fleet's totals, findings and events.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from llmtop.core.base.format import utc_iso
from llmtop.core.base.snapshot import Fleet, Replica
from llmtop.core.output.summary import ENGINE_KEYS, finding_json


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        return int(v) if v.is_integer() and abs(v) < 2**53 else v
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def replica_json(r: Replica) -> dict[str, Any]:
    """One row: its name, place and status, its figures, its own findings."""
    out: dict[str, Any] = {
        "name": r.name,
        "key": r.key,
        "engine": r.engine,
        "parent": r.parent,
        "status": r.status,
    }
    out.update({k: _clean(getattr(r.stats, k)) for k in ENGINE_KEYS})
    out["itl_p95_s"] = _clean(r.stats.itl_p95_s)
    out["findings"] = [finding_json(f) for f in r.findings]
    return out


def fleet_json(fleet: Fleet) -> dict[str, Any]:
    """The "fleet" object of `snapshot --json`."""
    return {
        "status": fleet.status,
        "totals": {k: _clean(v) for k, v in asdict(fleet.totals).items()},
        "findings": [finding_json(f) for f in fleet.findings],
        "events": [
            {"time": utc_iso(e.time), "kind": e.kind, "replica": e.replica, "summary": e.summary}
            for e in fleet.events
        ],
        "replicas": [replica_json(r) for r in fleet.replicas],
    }
