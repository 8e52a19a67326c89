"""The gateway's live limits and their validation: what PATCH /admin/limits may set.

Pure; a bad change raises LimitError naming the field, so the admin API can answer 400 with it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LimitError(ValueError):
    """A limit change with a wrong field, type or range; names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _check_int(field: str, value: object, minimum: int, nullable: bool) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        tail = " or null" if nullable else ""
        raise LimitError(field, f"{field} must be an integer >= {minimum}{tail}, got {value!r}")
    return value


def _check_float(field: str, value: object, nullable: bool) -> float | None:
    if value is None and nullable:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and abs(value) <= sys.float_info.max  # type: ignore[arg-type]  # 10**400: no float
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:  # type: ignore[arg-type]
        tail = " or null" if nullable else ""
        raise LimitError(field, f"{field} must be a number > 0{tail}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


MODES: tuple[str, ...] = ("manual", "auto")
QUEUE_POLICIES: tuple[str, ...] = ("fifo", "deadline", "codel", "lifo")


def _check_choice(field: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise LimitError(field, f"{field} must be one of {', '.join(choices)}, got {value!r}")
    return value


def validate_limits(current: Limits, changes: Mapping[str, object]) -> Limits:
    """The limits after `changes`, or a LimitError naming the first bad or unknown field."""
    known = set(current.to_dict())
    for field in changes:
        if field not in known:
            raise LimitError(field, f"unknown limit {field!r}; known: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for field, value in changes.items():
        if field == "max_concurrency":
            values[field] = _check_int(field, value, 1, nullable=False)
        elif field == "max_queue":
            values[field] = _check_int(field, value, 0, nullable=False)
        elif field in ("max_inflight_prompt_tokens", "max_inflight_kv_blocks"):
            values[field] = _check_int(field, value, 1, nullable=True)
        elif field == "mode":
            values[field] = _check_choice(field, value, MODES)
        elif field == "queue_policy":
            values[field] = _check_choice(field, value, QUEUE_POLICIES)
        elif field == "queue_timeout_s":
            values[field] = _check_float(field, value, nullable=False)
        else:  # rate_limit_rpm, ttft_slo_s
            values[field] = _check_float(field, value, nullable=True)
    return replace(current, **values)
