"""The times /admin/history is asked for: `since` and `until` each in seconds ago (`3600`,
`90s`, `30m`, `1h`, `2d`) or a unix time (a number past `ABSOLUTE_AFTER`). Pure."""

from __future__ import annotations

import re

from llmtop.core.pipeline.span import parse_span
from llmtop.errors import UsageError

ABSOLUTE_AFTER = 1e9
"""A number at least this large is a unix time (2001-09-09), not seconds ago (31 years)."""
_BARE = re.compile(r"\s*\d+(?:\.\d+)?\s*")


class WindowError(ValueError):
    """A since/until the endpoint cannot read: one line for the 400."""


def seconds(text: str) -> float:
    """`90`, `90s`, `30m`, `1h`, `2d` in seconds (core's `parse_span`); WindowError otherwise."""
    try:
        return parse_span(text)
    except UsageError:
        raise WindowError(f"{text!r} is not a duration (like 3600, 90s, 30m, 1h, 2d)") from None


def when(text: str, now: float, name: str) -> float:
    """A unix time from `text`: seconds ago (a duration) or a unix time."""
    try:
        value = seconds(text)
    except WindowError:
        raise WindowError(
            f"{name}={text!r}: give seconds ago (3600, 30m, 1h) or a unix time"
        ) from None
    if value >= ABSOLUTE_AFTER and _BARE.fullmatch(text):
        return value
    return now - value


def window(since: str | None, until: str | None, now: float) -> tuple[float, float | None]:
    """(since, until) as unix times from the query's strings; `since` is required."""
    if since is None or not since.strip():
        raise WindowError("since is required: seconds ago (3600, 30m, 1h) or a unix time")
    start = when(since, now, "since")
    end = None if until is None or not until.strip() else when(until, now, "until")
    if end is not None and end < start:
        raise WindowError("until is before since")
    return start, end
