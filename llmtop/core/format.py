"""Units for people: one place that turns numbers into text for the TUI, snapshot and reports.

Every function takes None (or a non-finite float) for unknown and prints "n/a", so a missing
value is never shown as 0.
"""

from __future__ import annotations

import math

NA = "n/a"


def _unknown(v: float | int | None) -> bool:
    """None, NaN and infinities print as n/a: none of them is a measurement."""
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def seconds(v: float | None) -> str:
    """A latency: '850 ms', '3.2 s', '1 m 05 s'."""
    if _unknown(v) or v is None:
        return NA
    if v < 1.0:
        return f"{v * 1000:.0f} ms" if v >= 0.0095 else f"{v * 1000:.1f} ms"
    if v < 60.0:
        return f"{v:.1f} s"
    m, s = divmod(round(v), 60)
    return f"{m} m {s:02d} s"


def tok_per_s(v: float | None) -> str:
    """A token rate: '1,041 tok/s', '8.5 tok/s'."""
    if _unknown(v) or v is None:
        return NA
    return f"{v:,.0f} tok/s" if v >= 100 else f"{v:.1f} tok/s"


def per_s(v: float | None, unit: str = "/s") -> str:
    """An event rate: '0.8/s', '12/s'."""
    if _unknown(v) or v is None:
        return NA
    return f"{v:,.0f}{unit}" if v >= 100 else f"{v:.1f}{unit}"


def frac(v: float | None) -> str:
    """A 0..1 fraction as a percentage: '93%'."""
    if _unknown(v) or v is None:
        return NA
    return f"{v * 100:.0f}%"


def count(v: float | int | None) -> str:
    """A count: '42', '38,800'."""
    if _unknown(v) or v is None:
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
