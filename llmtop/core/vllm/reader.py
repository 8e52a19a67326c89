"""One scrape's samples -> the numbers llmtop derives from (`scrape.EngineScrape`). Pure.
Data-parallel engines (the `engine` label) are summed (histograms bucket by bucket; KV usage
weighted by each engine's KV blocks); an absent series stays None; vLLM's old and new names are
both read (`names`). Each scrape is read through its structure's plan (`scrape_plan`).
"""

from __future__ import annotations

import operator
from dataclasses import replace

from llmtop.core.base.raw import Sample
from llmtop.core.vllm import scrape_plan
from llmtop.core.vllm.labelled import read_labelled
from llmtop.core.vllm.names import LABELLED_FAMILIES
from llmtop.core.vllm.scrape import EngineScrape, Histogram

_NAME = operator.itemgetter(0)  # Sample is a named tuple: (name, labels, value)
_LABELS = operator.itemgetter(1)
_VALUE = operator.itemgetter(2)


def extract(samples: tuple[Sample, ...], names: list[str] | None = None) -> EngineScrape:
    """Sum one scrape's samples over engines into an `EngineScrape`, through the plan of its
    structure (sample names and label sets, the same poll after poll and replica after replica:
    `scrape_plan`). `names`: the samples' names, when the caller has them already. A label that
    is not what it names (a bucket bound that is no number) raises ValueError."""
    if names is None:
        names = list(map(_NAME, samples))
    plan = scrape_plan.plan_of(names, list(map(_LABELS, samples)))
    scrape = plan.apply(list(map(_VALUE, samples)))
    if LABELLED_FAMILIES.isdisjoint(names):
        return scrape
    return with_labelled(scrape, samples)


def with_labelled(scrape: EngineScrape, samples: tuple[Sample, ...]) -> EngineScrape:
    """The scrape with its labelled field families (`labelled.read_labelled`) added. Counters by
    spec-decode position join the others, keyed by name in the window (the plan's columns do
    not cover them), so only an engine with speculative decoding leaves its plan's columns."""
    found = read_labelled(tuple(s for s in samples if s.name in LABELLED_FAMILIES))
    if not found.counters:
        return replace(scrape, labelled_families=found)
    counters = {**scrape.counters, **found.counters}
    return replace(
        scrape, counters=counters, counter_keys=None, counter_columns=None, labelled_families=found
    )


def histogram(samples: tuple[Sample, ...], family: str) -> Histogram | None:
    """One histogram family of a scrape (not one `extract` reads, such as
    `names.ITERATION_TOKENS`), summed over engines; None when it is not exported."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        if s.name.startswith(family):
            by_name.setdefault(s.name, []).append(s)
    if family + "_count" not in by_name and family + "_bucket" not in by_name:
        return None
    buckets = by_name.get(family + "_bucket", [])
    plan = scrape_plan.bucket_plan(tuple([s.labels for s in buckets]))
    return Histogram(
        buckets=plan.buckets([s.value for s in buckets]),
        sum=sum(s.value for s in by_name.get(family + "_sum", ())),
        count=sum(s.value for s in by_name.get(family + "_count", ())),
    )
