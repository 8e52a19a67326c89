"""What one scrape says about a server, for the fleet: its data-parallel engines (rows of
their own) and the counters that only a restart sends back. Pure."""

from __future__ import annotations

import operator
from collections import defaultdict

from llmtop.core.base.raw import Sample
from llmtop.core.derive.series import Key
from llmtop.core.vllm.scrape import EngineScrape

ENGINE_LABEL = "engine"
_ONE_PER_ENGINE = "vllm:num_requests_running"
_NAME = operator.itemgetter(0)  # Sample is a named tuple: (name, labels, value)
_RESTART_KEYS: tuple[Key, ...] = (
    ("prompt_tokens", None),
    ("generation_tokens", None),
    ("h:e2e", "count"),
    ("h:ttft", "count"),
)
"""Counters that only a restart sends back (finished requests, tokens)."""


def split_engines(
    samples: tuple[Sample, ...], names: list[str] | None = None
) -> dict[str, tuple[Sample, ...]]:
    """A data-parallel scrape's samples per `engine` label; {} when there is one engine.

    Samples without the label (vLLM's admission_rejections_total) stay with the server only.
    `names`: the samples' names, when the caller has them already.
    """
    if names is None:
        names = list(map(_NAME, samples))
    if names.count(_ONE_PER_ENGINE) < 2:
        return {}  # one engine (the usual case): no need to look at every label
    per: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        for k, v in s.labels:
            if k == ENGINE_LABEL:
                per[v].append(s)
                break
    return {k: tuple(v) for k, v in sorted(per.items())} if len(per) > 1 else {}


def restart_values(scrape: EngineScrape) -> dict[Key, float]:
    """The `_RESTART_KEYS` of `counter_values(scrape)`, read from the scrape itself."""
    out: dict[Key, float] = {}
    for key in _RESTART_KEYS:
        group, member = key
        if member is None:
            value = scrape.counters.get(str(group))
        else:
            h = scrape.histograms.get(str(group).removeprefix("h:"))
            value = None if h is None else h.count
        if value is not None:
            out[key] = value
    return out


def went_back(prev: dict[Key, float], now: dict[Key, float]) -> tuple[str, float, float] | None:
    """The first counter lower than at the previous poll: the engine restarted."""
    for key in _RESTART_KEYS:
        before, value = prev.get(key), now.get(key)
        if before is not None and value is not None and value < before:
            return str(key[0]).removeprefix("h:"), before, value
    return None
