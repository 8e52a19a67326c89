"""One vLLM scrape as the values llmtop uses: `EngineScrape` and its `Histogram`s. Pure.

Engines summed, None where not exported; built by `reader.extract` (through a
`scrape_plan.ScrapePlan`) and read by `derive`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtop.core.vllm.labelled import LabelledScrape


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram summed over engines: (upper bound, count) sorted, +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


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
    """Any series llmtop reads at all, in vLLM's names after a dialect's (False: the engine's
    metrics are off, or it speaks no dialect llmtop knows)."""
    names_used: dict[str, str] = field(default_factory=dict)
    """Logical name -> the exposed name actually read (shows old-name fallbacks)."""
    waiting_deferred: float | None = None
    """Waiting for a transient reason: LoRA budget, KV transfer, blocked (vLLM >= 0.20)."""
    kv_usage_frac_waiting: float | None = None
    """The highest KV use (0..1) among the engines with a request waiting; None when none
    waits (or the gauges are not exported). With data-parallel engines, "waiting at a full
    cache" is the full engine's, not the mean's."""
    counter_keys: tuple[tuple[str, object], ...] | None = field(
        default=None, compare=False, repr=False
    )
    """The keys `derive.counter_values` gives this scrape, in order, when its plan knows them
    (one tuple for every scrape of a structure, so the counter window knows its layout)."""
    counter_columns: list[float] | None = field(default=None, compare=False, repr=False)
    """Their values in that order (the plan adds them up once, for the window to keep)."""
    engine: str | None = "vllm"
    """The dialect it was read in (`core.dialects`), None when none was found."""
    engine_note: str | None = None
    """What is odd about its exposition: two engines' families, a forced dialect it lacks."""
    labelled_families: LabelledScrape | None = None
    """The labelled families of the field guide (`labelled.read_labelled`); None: none exported."""
