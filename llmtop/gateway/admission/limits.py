"""The gateway's live limits: what PATCH /admin/limits may set.

Pure; the fields, types and ranges are core.base.admin_api.LIMITS (one table for the whole package).
A bad change raises LimitError naming the field, so the admin API can answer 400 with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

from llmtop.core.base.admin_api import LimitsDoc, check_changes
from llmtop.errors import LimitError

__all__ = ["AUTOPILOT", "LEVERS", "LimitError", "Limits", "change_limits", "validate_limits"]

AUTOPILOT = "autopilot"
"""The source of the autopilot's own changes; any other source changing a lever it moves
switches the mode to manual."""
LEVERS = (
    "max_concurrency",
    "max_inflight_kv_blocks",
    "max_inflight_prompt_tokens",
    "max_unprefilled_prompt_tokens",
)
"""The limits the autopilot moves."""


@dataclass(frozen=True)
class Limits:
    """The live limits; None switches an optional one off."""

    max_concurrency: int
    max_queue: int
    queue_timeout_s: float
    rate_limit_rpm: float | None = None
    max_inflight_prompt_tokens: int | None = None
    max_inflight_kv_blocks: int | None = None
    """Cap on the summed predicted KV footprint (blocks) in flight; the autopilot moves it."""
    max_unprefilled_prompt_tokens: int | None = None
    """Cap on the prompt tokens admitted and not yet prefilled (no first token yet): the
    engine's prefill backlog, which sets a newly admitted request's TTFT; the autopilot sets it
    from the measured prefill rate."""
    ttft_slo_s: float | None = None
    """TTFT budget of a request (queue + engine) that admission works to: the SLO ([slo]
    ttft_s) from the start; changed live, an override for admission only. The deadline
    policies refuse what cannot meet it; fifo never reads it."""
    queue_policy: str = "fifo"
    """fifo (timeout only), deadline (reject at arrival / leave when the budget is gone),
    codel (Fail at Scale's controlled delay) or lifo (adaptive LIFO with codel)."""
    mode: str = "manual"
    """auto: the autopilot moves max_inflight_kv_blocks; manual: only people do."""

    def to_dict(self) -> LimitsDoc:
        """The /admin/limits document."""
        return cast(LimitsDoc, asdict(self))


def validate_limits(current: Limits, changes: Mapping[str, object]) -> Limits:
    """The limits after `changes`, or a LimitError naming the first bad or unknown field."""
    checked: dict[str, Any] = check_changes(changes)  # each value fits its field's type
    return replace(current, **checked)


def change_limits(
    current: Limits, changes: Mapping[str, object], source: str, reason: str | None
) -> tuple[Limits, str | None]:
    """The limits after a change from `source`, and the change's reason. In auto mode, a change
    to a lever the autopilot moves (LEVERS) from anyone but the autopilot switches the mode to
    manual, and the reason says so."""
    new = validate_limits(current, changes)
    if source != AUTOPILOT and current.mode == "auto" and "mode" not in changes:
        moved = [f for f in LEVERS if f in changes and getattr(new, f) != getattr(current, f)]
        if moved:
            new = validate_limits(new, {"mode": "manual"})
            reason = reason or f"{', '.join(moved)} set by {source}: autopilot off (manual)"
    return new, reason


def limit_events(
    old: Limits, new: Limits, source: str, reason: str | None, time: float
) -> list[dict[str, Any]]:
    """One /admin/events entry per field a change moved, at wall-clock `time`."""
    events: list[dict[str, Any]] = []
    for field, value in new.to_dict().items():
        before = getattr(old, field)
        if value != before:
            event: dict[str, Any] = {
                "time": time,
                "field": field,
                "old": before,
                "new": value,
                "source": source,
            }
            if reason is not None:
                event["reason"] = reason
            events.append(event)
    return events


def pause_event(old: bool, new: bool, source: str, time: float) -> dict[str, Any]:
    """The /admin/events entry of a pause or a resume."""
    return {"time": time, "field": "paused", "old": old, "new": new, "source": source}
