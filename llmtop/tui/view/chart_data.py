"""What the charts plot, pure: the throughput and TTFT series over the history, their ticks,
the history thinned to the points a chart has room for, and each snapshot's engines combined
once (`CombinedEngines`)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.derive.aggregate import combine


@dataclass(frozen=True)
class Series:
    """One chart line: x in seconds before the newest poll (<= 0), y values (None = gap)."""

    label: str
    xs: tuple[float, ...]
    ys: tuple[float | None, ...]
    color: str = "cyan"


@dataclass(frozen=True)
class ChartData:
    """What a chart draws; a horizontal line (an SLO) is optional."""

    title: str
    series: tuple[Series, ...]
    hline: float | None = None
    hline_label: str = ""
    y_unit: Literal["s", "count"] = "count"


def nice_step(span: float, most: int = 4) -> float:
    """A 1/2/5 x 10^k step that cuts `span` into at most `most` intervals."""
    if span <= 0:
        return 1.0
    raw = span / most
    k = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * k >= raw:
            return float(m * k)
    return float(10 * k)  # pragma: no cover - the loop always returns


def y_ticks(hi: float, unit: Literal["s", "count"]) -> tuple[list[float], list[str]]:
    """Round y ticks from 0 to at least `hi`, labelled in the chart's unit."""
    step = nice_step(hi if hi > 0 else 1.0)
    ticks = [step * i for i in range(math.ceil((hi if hi > 0 else 1.0) / step) + 1)]
    labels = ["0" if t == 0 else fmt.dur(t) if unit == "s" else fmt.num(t, 1) for t in ticks]
    return ticks, labels


def x_ticks(lo: float) -> tuple[list[float], list[str]]:
    """Ticks every 10 s .. 5 min back from 0 (now), labelled -30s, -2m."""
    span = max(-lo, 10.0)
    step = next((s for s in (10, 15, 30, 60, 120, 300, 600) if span / s <= 5), 600)
    ticks = [-step * i for i in range(int(span // step) + 1)][::-1]
    labels = ["now" if t == 0 else (f"{t / 60:.0f}m" if step >= 60 else f"{t:.0f}s") for t in ticks]
    return [float(t) for t in ticks], labels


def thin(history: Sequence[Snapshot], max_points: int) -> list[Snapshot]:
    """At most `max_points` evenly spread snapshots, the newest always kept (chart cost)."""
    n = len(history)
    if max_points <= 0 or n <= max_points:
        return list(history)
    step = n / max_points
    picked = [history[min(n - 1, round(n - 1 - i * step))] for i in range(max_points)]
    return picked[::-1]


def _xs(history: Sequence[Snapshot]) -> tuple[float, ...]:
    last = history[-1].time
    return tuple(s.time - last for s in history)


EngineOf = Callable[[Snapshot], EngineStats | None]
"""A snapshot's engines as one (`combine`, or a `CombinedEngines` that remembers it)."""


def _combined(snapshot: Snapshot) -> EngineStats | None:
    return combine(snapshot.engines)


class CombinedEngines:
    """`combine(snapshot.engines)` once per snapshot, for the `size` newest snapshots.

    A chart redraw reads every snapshot it plots; combining a fleet again for each would cost
    more than the rest of a poll's rendering. Keyed by identity (the entry keeps its snapshot,
    so an id is not reused while cached).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._memo: OrderedDict[int, tuple[Snapshot, EngineStats | None]] = OrderedDict()

    def __call__(self, snapshot: Snapshot) -> EngineStats | None:
        hit = self._memo.get(id(snapshot))
        if hit is not None and hit[0] is snapshot:
            return hit[1]
        engine = combine(snapshot.engines)
        self._memo[id(snapshot)] = (snapshot, engine)
        while len(self._memo) > self.size:  # the oldest first, as the history drops them
            self._memo.popitem(last=False)
        return engine


def throughput_chart(
    history: Sequence[Snapshot], max_points: int = 0, engine_of: EngineOf = _combined
) -> ChartData | None:
    """Prefill and decode tok/s over the history."""
    if not history:
        return None
    history = thin(history, max_points)
    engines = [engine_of(s) for s in history]
    xs = _xs(history)
    return ChartData(
        "tok/s: prefill vs decode",
        (
            Series(
                "prefill", xs, tuple(e.prompt_tok_per_s if e else None for e in engines), "magenta"
            ),
            Series("decode", xs, tuple(e.decode_tok_per_s if e else None for e in engines), "cyan"),
        ),
    )


def ttft_chart(
    history: Sequence[Snapshot],
    slo_s: float,
    max_points: int = 0,
    engine_of: EngineOf = _combined,
) -> ChartData | None:
    """TTFT p95 over the history against its SLO line."""
    if not history:
        return None
    history = thin(history, max_points)
    engines = [engine_of(s) for s in history]
    return ChartData(
        "TTFT p95 (s) vs SLO",
        (
            Series(
                "TTFT p95",
                _xs(history),
                tuple(e.ttft_p95_s if e else None for e in engines),
                "yellow",
            ),
        ),
        hline=slo_s,
        hline_label=f"SLO {fmt.dur(slo_s)}",
        y_unit="s",
    )
