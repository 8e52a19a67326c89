"""Spans of time as flags take them (`--past 1h`) and as the header names them (`1h30m`). Pure,
and light: a command's flags import it at start.
"""

from __future__ import annotations

import re

from llmtop.errors import UsageError

_SPAN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_span(text: str, option: str = "--past") -> float:
    """`1h`, `30m`, `90s`, `2d` or plain seconds -> seconds; UsageError naming `option` else."""
    m = _SPAN.fullmatch(text)
    if m is None:
        raise UsageError(f"{option} {text!r}: a duration such as 1h, 30m or 90s")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


def span_text(seconds: float) -> str:
    """Seconds as the header names a span: 1h, 1h30m, 10m, 45s."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    if m:
        return f"{m}m{sec:02d}s" if sec and m < 10 else f"{m}m"
    return f"{sec}s"
