"""vLLM metric names, old and new, and one scrape's samples -> the numbers llmtop derives from.

vLLM 0.10 to 0.33 (vLLM's metrics docs): `kv_cache_usage_perc` was `gpu_cache_usage_perc` before
0.9 (and on the V0 engine), the ITL histogram `inter_token_latency_seconds` was
`time_per_output_token_seconds` before 0.10.2, `prefix_cache_*` was `gpu_prefix_cache_*`. The
newer name wins when both are exported. Data-parallel engines (the `engine` label) are summed:
gauges and counters by value, histograms bucket by bucket; KV usage (a fraction) is averaged,
weighted by each engine's KV blocks. A series that is absent stays None.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import groupby
from typing import TYPE_CHECKING

from llmtop.core.base.quickinit import quick_init
from llmtop.core.base.raw import Labels, Sample

VLLM_PREFIX = "vllm:"

GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
FRACTIONS = frozenset({"kv_usage"})
"""Per-engine fractions: averaged over data-parallel engines (weighted by KV blocks), not summed."""
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
CACHE_CONFIG = "vllm:cache_config_info"

COUNTERS: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "admission_rejections": ("vllm:admission_rejections_total",),
}
FINISHED = "vllm:request_success_total"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
"""0.16+: prompt tokens by source (local_compute, local_cache_hit, external_kv_transfer)."""

HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue_time": ("vllm:request_queue_time_seconds",),
    "prefill_time": ("vllm:request_prefill_time_seconds",),
    "prompt_len": ("vllm:request_prompt_tokens",),
    "generation_len": ("vllm:request_generation_tokens",),
}


MEAN_ONLY = frozenset({"prompt_len", "generation_len"})
"""Histograms read for their mean only (Δsum/Δcount): their buckets are not parsed."""


def sample_names() -> frozenset[str]:
    """Every sample name llmtop reads from a vLLM scrape (the parser's keep-list)."""
    names = {WAITING_BY_REASON, CACHE_CONFIG, FINISHED, PROMPT_BY_SOURCE}
    for group in (GAUGES, COUNTERS):
        for alternatives in group.values():
            names.update(alternatives)
    for key, alternatives in HISTOGRAMS.items():
        for fam in alternatives:
            names.update((fam + "_sum", fam + "_count"))
            if key not in MEAN_ONLY:
                names.add(fam + "_bucket")
    return frozenset(names)


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


_NAME = operator.itemgetter(0)  # Sample is a named tuple: (name, labels, value)
_LABELS = operator.itemgetter(1)
_VALUE = operator.itemgetter(2)


def _label(labels: tuple[tuple[str, str], ...], key: str) -> str | None:
    for k, v in labels:
        if k == key:
            return v
    return None


def _le(value: str) -> float:
    return float("inf") if value in ("+Inf", "Inf", "inf") else float(value)


def extract(samples: tuple[Sample, ...], names: list[str] | None = None) -> EngineScrape:
    """Sum one scrape's samples over engines into an `EngineScrape`.

    What depends only on the scrape's structure (its sample names and label sets, the same
    poll after poll and replica after replica) is worked out once (`scrape_plan`); each scrape
    then only adds its values up, in the order `extract_direct` adds them. `names`: the
    samples' names, when the caller has them already.
    """
    if names is None:
        names = list(map(_NAME, samples))
    plan = scrape_plan.plan_of(names, list(map(_LABELS, samples)))
    if plan is None:
        return extract_direct(samples)
    return plan.apply(list(map(_VALUE, samples)))


def extract_direct(samples: tuple[Sample, ...]) -> EngineScrape:
    """`extract` sample by sample: the reading a `scrape_plan.ScrapePlan` stands for, and the
    one used where a plan cannot be made (a NaN bucket bound)."""
    by_name: dict[str, list[Sample]] = {}
    for name, run in groupby(samples, key=_NAME):  # a family's samples come together
        found = by_name.get(name)
        if found is None:
            by_name[name] = list(run)
        else:
            found.extend(run)
    used: dict[str, str] = {}

    def first(key: str, alternatives: tuple[str, ...]) -> list[Sample] | None:
        for name in alternatives:
            if name in by_name:
                used[key] = name
                return by_name[name]
        return None

    blocks = _blocks_by_engine([s.labels for s in by_name.get(CACHE_CONFIG, [])])
    gauges: dict[str, float | None] = {}
    for key, alternatives in GAUGES.items():
        found = first(key, alternatives)
        if found is None:
            gauges[key] = None
        elif key in FRACTIONS:
            gauges[key] = _weighted_mean(found, blocks)
        else:
            gauges[key] = sum(s.value for s in found)
    waiting_capacity = _by_reason(by_name, "capacity")
    waiting_deferred = _by_reason(by_name, "deferred")

    counters: dict[str, float] = {}
    for key, alternatives in COUNTERS.items():
        found = first(key, alternatives)
        if found is not None:
            counters[key] = sum(s.value for s in found)
            if key == "admission_rejections":
                for s in found:
                    reason = _label(s.labels, "reason") or "unknown"
                    counters[f"admission:{reason}"] = (
                        counters.get(f"admission:{reason}", 0.0) + s.value
                    )
    for s in by_name.get(FINISHED, ()):
        reason = _label(s.labels, "finished_reason") or "unknown"
        counters[f"finished:{reason}"] = counters.get(f"finished:{reason}", 0.0) + s.value
    for s in by_name.get(PROMPT_BY_SOURCE, ()):
        source = _label(s.labels, "source") or "unknown"
        key = f"prompt_source:{source}"
        counters[key] = counters.get(key, 0.0) + s.value

    histograms: dict[str, Histogram] = {}
    for key, alternatives in HISTOGRAMS.items():
        for fam in alternatives:
            if fam + "_count" in by_name or fam + "_bucket" in by_name:
                used[key] = fam
                histograms[key] = _histogram(by_name, fam)
                break

    capacity, block_size = _kv_capacity([s.labels for s in by_name.get(CACHE_CONFIG, [])])
    model = _model([s.labels for s in samples])
    return EngineScrape(
        gauges=gauges,
        waiting_capacity=waiting_capacity,
        counters=counters,
        histograms=histograms,
        kv_capacity_tokens=capacity,
        kv_block_size=block_size,
        model=model,
        has_vllm=any(s.name.startswith(VLLM_PREFIX) for s in samples),
        names_used=used,
        waiting_deferred=waiting_deferred,
    )


def _by_reason(by_name: dict[str, list[Sample]], reason: str) -> float | None:
    """`num_requests_waiting_by_reason{reason}` summed over engines; None when not exported."""
    found = [
        s.value for s in by_name.get(WAITING_BY_REASON, ()) if _label(s.labels, "reason") == reason
    ]
    return sum(found) if found else None


def _histogram(by_name: dict[str, list[Sample]], fam: str) -> Histogram:
    samples = by_name.get(fam + "_bucket", ())
    plan = scrape_plan.bucket_plan(tuple([s.labels for s in samples])) if samples else None
    if plan is not None:
        sorted_buckets = plan.buckets([s.value for s in samples])
    else:
        buckets: dict[float, float] = defaultdict(float)
        for s in samples:
            le = _label(s.labels, "le")
            if le is not None:
                buckets[_le(le)] += s.value
        sorted_buckets = tuple(sorted(buckets.items()))
    return Histogram(
        buckets=sorted_buckets,
        sum=sum(s.value for s in by_name.get(fam + "_sum", ())),
        count=sum(s.value for s in by_name.get(fam + "_count", ())),
    )


def _model(labels: list[Labels]) -> str | None:
    for ls in labels:
        model = _label(ls, "model_name")
        if model is not None:
            return model
    return None


def _blocks_by_engine(info: list[Labels]) -> dict[str, float]:
    """Engine label -> its num_gpu_blocks (engines whose value is unset are left out)."""
    out: dict[str, float] = {}
    for ls in info:
        try:
            out[_label(ls, "engine") or ""] = float(_label(ls, "num_gpu_blocks") or "")
        except ValueError:
            continue
    return out


def _weighted_mean(samples: list[Sample], weights: dict[str, float]) -> float:
    """Mean of a per-engine fraction, weighted by each engine's KV blocks when all are known."""
    ws = [weights.get(_label(s.labels, "engine") or "") for s in samples]
    if all(w for w in ws):
        total = sum(w for w in ws if w)
        return sum(s.value * (w or 0.0) for s, w in zip(samples, ws, strict=True)) / total
    return sum(s.value for s in samples) / len(samples)


def _kv_capacity(info: list[Labels]) -> tuple[int | None, int | None]:
    """KV capacity in tokens summed over engines: num_gpu_blocks x block_size per engine."""
    total = 0
    block_size: int | None = None
    for ls in info:
        try:
            blocks = int(_label(ls, "num_gpu_blocks") or "")
            size = int(_label(ls, "block_size") or "")
        except ValueError:
            return None, None
        total += blocks * size
        block_size = size
    return (total or None), block_size


# Last, as the plans read this module's names and this module reads the plans: a cycle that
# Python resolves when each side only looks the other up at call time.
from llmtop.core.vllm import scrape_plan  # noqa: E402
