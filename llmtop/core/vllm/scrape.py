"""One vLLM scrape as the values llmtop uses: `EngineScrape` and its `Histogram`s. Pure.

Engines summed, None where not exported; built by `engines.extract` (through a
`scrape_plan.ScrapePlan`, or sample by sample) and read by `derive`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmtop.core.base.quickinit import quick_init


@quick_init
@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram summed over engines: (upper bound, count) sorted, +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @classmethod
    def planned(
        cls, bounds: list[float], columns: list[float], first: int, total: float, count: float
    ) -> Histogram:
        """A histogram whose buckets are zipped from a plan's columns (`bounds` and the
        counts from `columns[first]` on) when first read: derive reads the counter window's
        columns instead, so most scrapes' buckets are never read. Once read, the same object
        as one built with them (equal, same repr and hash)."""
        self = cls.__new__(cls)
        self.__dict__.update(sum=total, count=count, _columns=(bounds, columns, first))
        return self

    if not TYPE_CHECKING:  # hidden from mypy: it would make every attribute an Any

        def __getattr__(self, name: str) -> object:
            """`buckets` of a `planned` histogram, zipped on first read (called only for an
            attribute not found)."""
            lazy = self.__dict__.get("_columns") if name == "buckets" else None
            if lazy is None:
                raise AttributeError(name)
            bounds, columns, first = lazy
            end = first + len(bounds)
            buckets = self.__dict__["buckets"] = tuple(zip(bounds, columns[first:end], strict=True))
            return buckets


@quick_init
@dataclass(frozen=True)
class EngineScrape:
    """The values of one scrape that llmtop uses, engines summed; None = not exported."""

    gauges: dict[str, float | None]
    waiting_capacity: float | None
    counters: dict[str, float]
    """Counter name (or ``finished:<reason>``, ``admission:<reason>``, ``prompt_source:<source>``)
    -> cumulative value."""
    histograms: dict[str, Histogram]
    kv_capacity_tokens: int | None
    kv_block_size: int | None
    model: str | None
    has_vllm: bool
    """Any vllm:* series at all (False: --disable-log-stats, or not a vLLM)."""
    names_used: dict[str, str] = field(default_factory=dict)
    """Logical name -> the exposed name actually read (shows old-name fallbacks)."""
    waiting_deferred: float | None = None
    """Waiting for a transient reason: LoRA budget, KV transfer, blocked (vLLM >= 0.20)."""
    counter_keys: tuple[tuple[str, object], ...] | None = field(
        default=None, compare=False, repr=False
    )
    """The keys `derive.counter_values` gives this scrape, in order, when its plan knows them
    (one tuple for every scrape of a structure, so the counter window knows its layout)."""
    counter_columns: list[float] | None = field(default=None, compare=False, repr=False)
    """Their values in that order (the plan adds them up once, for the window to keep)."""
