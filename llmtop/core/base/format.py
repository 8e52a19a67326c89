"""Units for people: the one place numbers and times become text. None prints "n/a", never 0
(so do NaN and infinities in the sentence forms): '850 ms', '14.2 GiB' for findings, snapshot
and report; compact '850ms', '14.2G', '1.2k' for the TUI's panels. An epoch time is local on
a screen, UTC saying so in a document; other clocks show as durations (docs/recording.md).
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from math import isfinite

NA = "n/a"


def _unknown(v: float | int | None) -> bool:
    """None, NaN and infinities print as n/a: none of them is a measurement. (Inlined in the
    forms the findings use: their text is built for every replica at every poll.)"""
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def seconds(v: float | None) -> str:
    """A latency: '850 ms', '3.2 s', '1 m 05 s'."""
    if v is None or (isinstance(v, float) and not isfinite(v)):  # `_unknown`, inlined
        return NA
    if v < 1.0:
        return f"{v * 1000:.0f} ms" if v >= 0.0095 else f"{v * 1000:.1f} ms"
    if v < 60.0:
        return f"{v:.1f} s"
    m, s = divmod(round(v), 60)
    return f"{m} m {s:02d} s"


def tok_per_s(v: float | None) -> str:
    """A token rate: '1,041 tok/s', '8.5 tok/s'."""
    if v is None or (isinstance(v, float) and not isfinite(v)):  # `_unknown`, inlined
        return NA
    return f"{v:,.0f} tok/s" if v >= 100 else f"{v:.1f} tok/s"


def per_s(v: float | None, unit: str = "/s") -> str:
    """An event rate: '0.8/s', '12/s'."""
    if v is None or (isinstance(v, float) and not isfinite(v)):  # `_unknown`, inlined
        return NA
    return f"{v:,.0f}{unit}" if v >= 100 else f"{v:.1f}{unit}"


def frac(v: float | None) -> str:
    """A 0..1 fraction as a percentage: '93%'."""
    if v is None or (isinstance(v, float) and not isfinite(v)):  # `_unknown`, inlined
        return NA
    return f"{v * 100:.0f}%"


def count(v: float | int | None) -> str:
    """A count: '42', '38,800'."""
    if v is None or (isinstance(v, float) and not isfinite(v)):  # `_unknown`, inlined
        return NA
    return f"{v:,.0f}"


def gib(v: float | int | None) -> str:
    """Bytes in GiB: '14.2 GiB'."""
    if _unknown(v) or v is None:
        return NA
    return f"{v / 2**30:.1f} GiB"


def watts(v: float | None) -> str:
    """Power: '287 W'."""
    return NA if _unknown(v) or v is None else f"{v:.0f} W"


def celsius(v: float | None) -> str:
    """Temperature: '71 °C'."""
    return NA if _unknown(v) or v is None else f"{v:.0f} °C"


def mhz(v: float | None) -> str:
    """A clock: '1,410 MHz'."""
    return NA if _unknown(v) or v is None else f"{v:,.0f} MHz"


# ---- time of day (the time-zone policy: docs/recording.md) ----------------------------------


def local_clock(t: float) -> str:
    """An epoch time as the viewer's local HH:MM:SS (screens)."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def utc_time(t: float | None) -> str:
    """An epoch time as 'YYYY-MM-DD HH:MM:SS UTC' (the report)."""
    if t is None:
        return NA
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def utc_iso(t: float) -> str:
    """An epoch time as ISO 8601 UTC, second resolution (the snapshot JSON)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- compact forms for the TUI's panels -----------------------------------------------------


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


def pct(v: float | None) -> str:
    """A fraction as a percentage: 0.934 -> 93%."""
    return NA if v is None else f"{v * 100:.0f}%"


def gib_short(b: float | None) -> str:
    """Bytes as GiB with one decimal (70.1G)."""
    return NA if b is None else f"{b / 2**30:.1f}G"


def rate(x: float | None) -> str:
    """An events-per-second rate without its unit: 0, 0.25, 2.1, 12."""
    if x is None:
        return NA
    if x == 0:
        return "0"
    if abs(x) < 10:
        return f"{x:.2f}".rstrip("0").rstrip(".") if abs(x) < 1 else f"{x:.1f}"
    return f"{x:.0f}"


def age(s: float | None) -> str:
    """How old the data is: 0.4s, 12s, 3m."""
    if s is None:
        return NA
    if s < 10:
        return f"{max(s, 0.0):.1f}s"
    if s < 120:
        return f"{s:.0f}s"
    return f"{s / 60:.0f}m"
