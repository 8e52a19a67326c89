"""Tiny number formatting for the panels: units, n/a for unknown, fixed widths where it helps.

Kept local to the TUI until llmtop.core.format lands; every function maps None to "n/a" so an
unknown value can never be read as zero.
"""

from __future__ import annotations

import time

NA = "n/a"


def dur(s: float | None) -> str:
    """Seconds as 850ms, 1.23s, 12.3s, 2m05s."""
    if s is None:
        return NA
    if s < 0:
        s = 0.0
    if s < 1.0:
        return f"{s * 1000:.0f}ms"
    if s < 10.0:
        return f"{s:.2f}s"
    if s < 100.0:
        return f"{s:.1f}s"
    m, sec = divmod(round(s), 60)
    return f"{m}m{sec:02d}s"


def num(x: float | None, digits: int = 1) -> str:
    """A count or rate with k/M suffixes: 950, 1.2k, 38.8k, 1.5M."""
    if x is None:
        return NA
    ax = abs(x)
    if ax >= 1e6:
        return f"{x / 1e6:.{digits}f}M"
    if ax >= 1e4:
        return f"{x / 1e3:.0f}k" if ax >= 1e5 else f"{x / 1e3:.{digits}f}k"
    if ax >= 1000:
        return f"{x / 1e3:.{digits}f}k"
    if ax >= 100 or float(x).is_integer():
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def integer(x: float | None) -> str:
    """A whole count (running, waiting, limits)."""
    return NA if x is None else f"{x:.0f}"


def pct(frac: float | None) -> str:
    """A fraction as a percentage: 0.934 -> 93%."""
    return NA if frac is None else f"{frac * 100:.0f}%"


def gib(b: float | None) -> str:
    """Bytes as GiB with one decimal (70.1G)."""
    return NA if b is None else f"{b / 2**30:.1f}G"


def per_s(x: float | None) -> str:
    """An events-per-second rate: 0, 0.25, 2.1, 12."""
    if x is None:
        return NA
    if x == 0:
        return "0"
    if abs(x) < 10:
        return f"{x:.2f}".rstrip("0").rstrip(".") if abs(x) < 1 else f"{x:.1f}"
    return f"{x:.0f}"


def clock(t: float) -> str:
    """Local wall-clock HH:MM:SS of an epoch time (the incident timeline)."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def age(s: float | None) -> str:
    """How old the data is: 0.4s, 12s, 3m."""
    if s is None:
        return NA
    if s < 10:
        return f"{max(s, 0.0):.1f}s"
    if s < 120:
        return f"{s:.0f}s"
    return f"{s / 60:.0f}m"
