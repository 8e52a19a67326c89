"""Scrape plans for `reader.extract`: what a scrape's structure decides (the samples each figure
adds, each `le`'s bound, KV capacity, model), worked out once (a fleet's vLLMs export the same
series poll after poll); each scrape adds its values in the plain reading's order, bit for bit.
Held equal by tests/unit/test_engines.py; buys 0.7-0.9 % of a core at 100 replicas, BENCHMARKS §15.
"""

from __future__ import annotations

import operator

from llmtop.core.base.raw import Labels
from llmtop.core.vllm.names import (
    CACHE_CONFIG,
    COUNTERS,
    FINISHED,
    FRACTIONS,
    GAUGES,
    HISTOGRAMS,
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
from llmtop.core.vllm.scrape import EngineScrape, Histogram


class _BucketPlan:
    """How one family's bucket samples add up, worked out once per label sets: which bound
    each sample counts in (its `le`, parsed), the bounds sorted, the samples of each bound."""

    __slots__ = ("bounds", "single")

    def __init__(self, les: list[float | None]) -> None:
        members: dict[float, list[int]] = {}
        for i, le in enumerate(les):
            if le is not None:
                members.setdefault(le, []).append(i)
        self.bounds = [(le, members[le]) for le in sorted(members)]
        self.single = [(le, idx[0]) for le, idx in self.bounds if len(idx) == 1]
        """(bound, sample) when every bound has one sample (one engine: the usual case)."""
        if len(self.single) != len(self.bounds):
            self.single = []

    def buckets(self, values: list[float]) -> tuple[tuple[float, float], ...]:
        """(bound, count) sorted, each count added up from 0.0 in the samples' order."""
        if self.single:
            return tuple([(le, 0.0 + values[i]) for le, i in self.single])
        out = []
        for le, idx in self.bounds:
            total = 0.0
            for i in idx:
                total += values[i]
            out.append((le, total))
        return tuple(out)


_BUCKET_PLANS: dict[tuple[Labels, ...], _BucketPlan] = {}
"""Label sets of one family's buckets -> their plan. Label sets repeat every scrape; the bound
of each is parsed once."""
_BUCKET_PLANS_MAX = 4096


def bucket_plan(labels: tuple[Labels, ...]) -> _BucketPlan:
    """The plan of one family's buckets by their label sets."""
    plan = _BUCKET_PLANS.get(labels)
    if plan is not None:
        return plan
    les = [None if (le := label_value(ls, "le")) is None else bucket_bound(le) for ls in labels]
    made = _BucketPlan(les)
    if len(_BUCKET_PLANS) >= _BUCKET_PLANS_MAX:
        _BUCKET_PLANS.clear()
    _BUCKET_PLANS[labels] = made
    return made


_Op = tuple[str, list[int]]
"""("sum", samples) added by sum(), as the direct reading does, or ("fold", samples) added
from 0.0 one by one (its counters.get(key, 0.0) + value)."""


class ScrapePlan:
    """What a scrape's structure decides, worked out once: which samples each figure adds up
    and how (the same additions in the same order as the plain reading), and the figures read
    from labels alone (KV capacity, model, the names used)."""

    def __init__(self, names: list[str], labels: list[Labels]) -> None:
        by_name: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            by_name.setdefault(name, []).append(i)
        self.used: dict[str, str] = {}

        def first(key: str, alternatives: tuple[str, ...]) -> list[int] | None:
            for name in alternatives:
                if name in by_name:
                    self.used[key] = name
                    return by_name[name]
            return None

        info = [labels[i] for i in by_name.get(CACHE_CONFIG, [])]
        blocks = blocks_by_engine(info)
        self.gauges: list[tuple[str, str, list[int], list[float], float]] = []
        self.per_engine: dict[str, list[tuple[str, int]]] = {}
        """Gauge key -> (engine label, sample) of each of its samples (`fullest_waiting`)."""
        for key, alternatives in GAUGES.items():
            found = first(key, alternatives)
            engine_of = [label_value(labels[i], "engine") or "" for i in found or ()]
            self.per_engine[key] = list(zip(engine_of, found or (), strict=True))
            if found is None:
                self.gauges.append((key, "none", [], [], 0.0))
            elif key in FRACTIONS:
                ws = [blocks.get(label_value(labels[i], "engine") or "") for i in found]
                if all(w for w in ws):
                    weights = [w or 0.0 for w in ws]
                    total = sum(w for w in ws if w)
                    self.gauges.append((key, "weighted", found, weights, total))
                else:
                    self.gauges.append((key, "mean", found, [], 0.0))
            else:
                self.gauges.append((key, "sum", found, [], 0.0))
        reasons = [
            (i, label_value(labels[i], "reason")) for i in by_name.get(WAITING_BY_REASON, [])
        ]
        self.capacity = [i for i, r in reasons if r == "capacity"]
        self.deferred = [i for i, r in reasons if r == "deferred"]

        counters: dict[str, _Op] = {}
        for key, alternatives in COUNTERS.items():
            found = first(key, alternatives)
            if found is not None:
                counters[key] = ("sum", found)
                if key == "admission_rejections":
                    for i in found:
                        why = label_value(labels[i], "reason") or "unknown"
                        counters.setdefault(f"admission:{why}", ("fold", []))[1].append(i)
        for i in by_name.get(FINISHED, ()):
            why = label_value(labels[i], "finished_reason") or "unknown"
            counters.setdefault(f"finished:{why}", ("fold", []))[1].append(i)
        for i in by_name.get(PROMPT_BY_SOURCE, ()):
            source = label_value(labels[i], "source") or "unknown"
            counters.setdefault(f"prompt_source:{source}", ("fold", []))[1].append(i)
        self.counter_names = list(counters)
        keys: list[tuple[str, object]] = [(name, None) for name in counters]
        folds = [(how == "sum", idx) for how, idx in counters.values()]
        self.histograms: list[tuple[str, list[float], int]] = []
        """(key, bucket bounds, column of its first bucket): its buckets, then sum and count."""
        for key, alternatives in HISTOGRAMS.items():
            for fam in alternatives:
                if fam + "_count" in by_name or fam + "_bucket" in by_name:
                    self.used[key] = fam
                    buckets = by_name.get(fam + "_bucket", [])
                    plan = bucket_plan(tuple([labels[i] for i in buckets]))
                    bounds = [le for le, _ in plan.bounds]
                    self.histograms.append((key, bounds, len(keys)))
                    for le, members in plan.bounds:
                        keys.append(("h:" + key, le))
                        folds.append((False, [buckets[i] for i in members]))
                    keys += [("h:" + key, "sum"), ("h:" + key, "count")]
                    folds.append((True, by_name.get(fam + "_sum", [])))
                    folds.append((True, by_name.get(fam + "_count", [])))
                    break
        self.keys = tuple(keys)
        """The counter window's keys (`derive.counter_values`' order), one per column."""
        self._folds = folds
        self._zeros = [0 if by_sum else 0.0 for by_sum, _ in folds]
        self._gather = operator.itemgetter(*[idx[0] if idx else 0 for _, idx in folds] or [0])
        """The first sample of every column, in one call (one engine: the only one)."""
        self._others = [(i, by_sum, idx) for i, (by_sum, idx) in enumerate(folds) if len(idx) != 1]
        """Columns of no sample or of several (engines, reasons), added up one by one."""
        self.kv = kv_capacity(info)
        self.model = model_name(labels)
        self.has_vllm = any(name.startswith(VLLM_PREFIX) for name in names)

    def columns(self, values: list[float]) -> list[float]:
        """The values of `keys`, each added up as the direct reading adds it: sum() of its
        samples (a counter, a histogram's sum or count; 0 when none) or from 0.0 one by one
        (a bucket, a counter by reason)."""
        if len(self._zeros) < 2:  # itemgetter of one index gives no tuple
            return [self._add_up(values, *fold) for fold in self._folds]
        # one sample: 0 + v is sum([v]), 0.0 + v the fold of one
        out = list(map(operator.add, self._zeros, self._gather(values)))
        for i, by_sum, idx in self._others:
            out[i] = self._add_up(values, by_sum, idx)
        return out

    @staticmethod
    def _add_up(values: list[float], by_sum: bool, idx: list[int]) -> float:
        if by_sum:
            return sum([values[i] for i in idx])
        total = 0.0
        for i in idx:
            total = total + values[i]
        return total

    def apply(self, values: list[float]) -> EngineScrape:
        """The scrape of these values (in the samples' order)."""
        gauges: dict[str, float | None] = {}
        for key, how, idx, weights, total in self.gauges:
            if how == "none":
                gauges[key] = None
            elif how == "sum":
                gauges[key] = sum([values[i] for i in idx])
            elif how == "weighted":
                mine = [values[i] for i in idx]
                gauges[key] = sum([v * w for v, w in zip(mine, weights, strict=True)]) / total
            else:
                gauges[key] = sum([values[i] for i in idx]) / len(idx)
        columns = self.columns(values)
        histograms: dict[str, Histogram] = {}
        for key, bounds, first in self.histograms:
            end = first + len(bounds)
            buckets = tuple(zip(bounds, columns[first:end], strict=True))
            histograms[key] = Histogram(buckets, columns[end], columns[end + 1])
        usage, waiting = (
            [(engine, values[i]) for engine, i in self.per_engine[key]]
            for key in ("kv_usage", "waiting")
        )
        capacity, block_size = self.kv
        return EngineScrape(
            gauges=gauges,
            waiting_capacity=sum([values[i] for i in self.capacity]) if self.capacity else None,
            counters=dict(zip(self.counter_names, columns[: len(self.counter_names)], strict=True)),
            histograms=histograms,
            kv_capacity_tokens=capacity,
            kv_block_size=block_size,
            model=self.model,
            has_vllm=self.has_vllm,
            names_used=dict(self.used),
            waiting_deferred=sum([values[i] for i in self.deferred]) if self.deferred else None,
            kv_usage_frac_waiting=fullest_waiting(usage, waiting),
            counter_keys=self.keys,
            counter_columns=columns,
        )


_SCRAPE_PLANS: dict[tuple[tuple[str, ...], tuple[Labels, ...]], ScrapePlan] = {}
"""Structures seen -> their plan."""
_SCRAPE_PLANS_MAX = 256


def plan_of(names: list[str], labels: list[Labels]) -> ScrapePlan:
    """The plan of a scrape with these sample names and label sets."""
    key = (tuple(names), tuple(labels))
    found = _SCRAPE_PLANS.get(key)
    if found is None:
        found = ScrapePlan(names, labels)
        if len(_SCRAPE_PLANS) >= _SCRAPE_PLANS_MAX:
            _SCRAPE_PLANS.clear()
        _SCRAPE_PLANS[key] = found
    return found
