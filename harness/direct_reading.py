"""The plain reading of a scrape, sample by sample: what `reader.extract`'s plans
(`core.vllm.scrape_plan`) stand for. The oracle of tests/unit/test_vllm_reader.py's hypothesis test
and `bench/bench_fleet_pipeline.py --without plan`'s plain side; llmtop itself reads through
the plans only.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from itertools import groupby

from llmtop.core.base.raw import Sample
from llmtop.core.vllm.names import (
    CACHE_CONFIG,
    COUNTERS,
    FINISHED,
    FRACTIONS,
    GAUGES,
    HISTOGRAMS,
    LABELLED_FAMILIES,
    PROMPT_BY_SOURCE,
    VLLM_PREFIX,
    WAITING_BY_REASON,
    blocks_by_engine,
    bucket_bound,
    fullest_waiting,
    kv_capacity,
    label_value,
    model_name,
)
from llmtop.core.vllm.reader import with_labelled
from llmtop.core.vllm.scrape import EngineScrape, Histogram

_NAME = operator.itemgetter(0)


def extract_direct(samples: tuple[Sample, ...]) -> EngineScrape:
    """`extract` sample by sample: the reading a `scrape_plan.ScrapePlan` stands for, and the
    one used where a plan cannot be made (a NaN bucket bound)."""
    scrape = _direct(samples)
    if LABELLED_FAMILIES.isdisjoint(s.name for s in samples):
        return scrape
    return with_labelled(scrape, samples)


def _direct(samples: tuple[Sample, ...]) -> EngineScrape:
    """The families a plan covers, sample by sample."""
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

    blocks = blocks_by_engine([s.labels for s in by_name.get(CACHE_CONFIG, [])])
    gauges: dict[str, float | None] = {}
    per_engine: dict[str, list[tuple[str, float]]] = {}
    for key, alternatives in GAUGES.items():
        found = first(key, alternatives)
        per_engine[key] = [(label_value(s.labels, "engine") or "", s.value) for s in found or ()]
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
                    reason = label_value(s.labels, "reason") or "unknown"
                    counters[f"admission:{reason}"] = (
                        counters.get(f"admission:{reason}", 0.0) + s.value
                    )
    for s in by_name.get(FINISHED, ()):
        reason = label_value(s.labels, "finished_reason") or "unknown"
        counters[f"finished:{reason}"] = counters.get(f"finished:{reason}", 0.0) + s.value
    for s in by_name.get(PROMPT_BY_SOURCE, ()):
        source = label_value(s.labels, "source") or "unknown"
        key = f"prompt_source:{source}"
        counters[key] = counters.get(key, 0.0) + s.value

    histograms: dict[str, Histogram] = {}
    for key, alternatives in HISTOGRAMS.items():
        for fam in alternatives:
            if fam + "_count" in by_name or fam + "_bucket" in by_name:
                used[key] = fam
                histograms[key] = _histogram(by_name, fam)
                break

    capacity, block_size = kv_capacity([s.labels for s in by_name.get(CACHE_CONFIG, [])])
    model = model_name([s.labels for s in samples])
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
        kv_usage_frac_waiting=fullest_waiting(per_engine["kv_usage"], per_engine["waiting"]),
    )


def _by_reason(by_name: dict[str, list[Sample]], reason: str) -> float | None:
    """`num_requests_waiting_by_reason{reason}` summed over engines; None when not exported."""
    found = [
        s.value
        for s in by_name.get(WAITING_BY_REASON, ())
        if label_value(s.labels, "reason") == reason
    ]
    return sum(found) if found else None


def _histogram(by_name: dict[str, list[Sample]], fam: str) -> Histogram:
    buckets: dict[float, float] = defaultdict(float)
    for s in by_name.get(fam + "_bucket", ()):
        le = label_value(s.labels, "le")
        if le is not None:
            buckets[bucket_bound(le)] += s.value
    return Histogram(
        buckets=tuple(sorted(buckets.items())),
        sum=sum(s.value for s in by_name.get(fam + "_sum", ())),
        count=sum(s.value for s in by_name.get(fam + "_count", ())),
    )


def _weighted_mean(samples: list[Sample], weights: dict[str, float]) -> float:
    """Mean of a per-engine fraction, weighted by each engine's KV blocks when all are known."""
    ws = [weights.get(label_value(s.labels, "engine") or "") for s in samples]
    if all(w for w in ws):
        total = sum(w for w in ws if w)
        return sum(s.value * (w or 0.0) for s, w in zip(samples, ws, strict=True)) / total
    return sum(s.value for s in samples) / len(samples)
