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

__all__ = ["LimitError", "Limits", "validate_limits"]


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
    ttft_slo_s: float | None = None
    """TTFT budget of a request (queue + engine); the deadline queue rejects what cannot meet it."""
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
