"""One engine's scrapes over a window -> `EngineStats`: reset-aware rates, quantiles, KV arithmetic.
A quantile in the first bucket (ITL at a few ms a token all lands under le=0.01, where
interpolation says 0.005 s whatever the truth) reads the window's mean, Δsum/Δcount, capped at
that bound. Tokens per request: Δsum/Δcount, else (none finished) the cumulative means.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import NamedTuple

from llmtop.core.base.snapshot import EngineStats
from llmtop.core.derive.histogram import Buckets
from llmtop.core.derive.series import CounterWindow, Key
from llmtop.core.vllm.scrape import EngineScrape

NO_GAUGES = (
    "no running/waiting/KV gauges yet (a vLLM with several API servers exports them only "
    "after its first request)"
)
NO_GAUGES_OTHER = (
    "no running/waiting gauges yet (some engines, Dynamo's frontend among them, export them only "
    "after the first request)"
)


def counter_values(scrape: EngineScrape) -> dict[Key, float]:
    """Flatten an `EngineScrape`'s counters and histograms into `CounterWindow` keys."""
    values: dict[Key, float] = {(name, None): v for name, v in scrape.counters.items()}
    for key, h in scrape.histograms.items():
        group = "h:" + key
        for le, c in h.buckets:
            values[(group, le)] = c
        values[(group, "sum")] = h.sum
        values[(group, "count")] = h.count
    return values


def counter_columns(scrape: EngineScrape) -> tuple[tuple[Key, ...], list[float]]:
    """`counter_values` as (keys, values) in its order: a planned scrape has them already, its
    keys one tuple for every scrape of the structure."""
    keys, columns = scrape.counter_keys, scrape.counter_columns
    if keys is None or columns is None:
        values = counter_values(scrape)
        return tuple(values), list(values.values())
    return keys, columns


_BOUND = operator.itemgetter(0)


class _Hist:
    """A histogram's increments over the window."""

    def __init__(self, window: CounterWindow, key: str, window_s: float) -> None:
        buckets, self.sum, self.count = window.histogram("h:" + key, window_s)
        self._sorted = Buckets(buckets)  # sorted once for all the quantiles read
        self._first_bound = min(map(_BOUND, buckets)) if buckets else None

    def mean(self) -> float | None:
        if self.sum is None or not self.count:
            return None
        return self.sum / self.count

    def quantiles(self, *qs: float) -> list[float | None]:
        """Each q-quantile; one that lands in the first bucket is the window's mean, capped at
        that bucket's bound (see the module docstring)."""
        mean, first = self.mean(), self._first_bound
        cap = min(mean, first) if mean is not None and first is not None else None
        return self._sorted.quantiles(qs, cap)


def _window_mean(window: CounterWindow, key: str, window_s: float) -> float | None:
    """Δsum/Δcount of a histogram read for its mean only (`_Hist.mean` without its buckets)."""
    total = window.delta(("h:" + key, "sum"), window_s)
    count = window.delta(("h:" + key, "count"), window_s)
    return None if total is None or not count else total / count


def _cumulative_mean(scrape: EngineScrape, key: str) -> float | None:
    h = scrape.histograms.get(key)
    return h.sum / h.count if h is not None and h.count > 0 else None


class _CounterNames:
    """The counters derive reads by their prefix, in the scrape's order: finished and refused
    requests by reason, prompt tokens by source. The same for every scrape of a structure."""

    __slots__ = ("by_reason", "sources")

    def __init__(self, names: Iterable[str]) -> None:
        self.by_reason: list[tuple[Key, bool, str]] = []
        """(window key, finished (else refused), reason)."""
        self.sources: list[str] = []
        for name in names:
            kind, _, reason = name.partition(":")
            if kind in ("finished", "admission"):
                self.by_reason.append(((name, None), kind == "finished", reason))
            if name.startswith("prompt_source:"):
                self.sources.append(name)


_NAMES: dict[int, tuple[object, _CounterNames]] = {}
"""id(a plan's counter keys) -> (those keys, kept alive so the id stays theirs; their names)."""
_NAMES_MAX = 256


def _names_of(scrape: EngineScrape) -> _CounterNames:
    """The scrape's `_CounterNames`, worked out once per plan (its counter keys' tuple is
    the same object for every scrape of the structure)."""
    keys = scrape.counter_keys
    if keys is None:
        return _CounterNames(scrape.counters)
    found = _NAMES.get(id(keys))
    if found is None or found[0] is not keys:
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()
        found = _NAMES[id(keys)] = (keys, _CounterNames(scrape.counters))
    return found[1]


def derive_engine(
    url: str,
    scrape: EngineScrape,
    window: CounterWindow,
    window_s: float,
    *,
    version: str | None = None,
) -> EngineStats:
    """EngineStats for one up engine from its latest scrape and its counter window."""
    if not scrape.has_vllm:
        return EngineStats(
            url=url,
            up=True,
            version=version,
            engine=scrape.engine,
            engine_note=scrape.engine_note,
            stats_disabled=True,
            error="exports no metrics llmtop reads (vLLM started with --disable-log-stats, or an "
            "engine whose metrics are off?)",
        )

    deltas = window.counter_deltas(window_s)
    span = window.span_s(window_s)

    def rate(name: str) -> float | None:
        d = deltas.get((name, None))
        return None if d is None or not span else d / span

    def delta(name: str) -> float | None:
        return deltas.get((name, None))

    g = scrape.gauges
    running = g.get("running")
    decode = rate("generation_tokens")
    per_seq = decode / running if decode is not None and running else None
    finished: dict[str, float] = {}
    refused: dict[str, float] = {}
    names = _names_of(scrape)
    if span:
        for key, is_finished, reason in names.by_reason:
            d = deltas.get(key)
            if d is not None:
                (finished if is_finished else refused)[reason] = d / span

    recent = window.counter_deltas(min(window_s, LEVEL_WINDOW_S))
    hits, queries = recent.get(("prefix_hits", None)), recent.get(("prefix_queries", None))
    if not queries:
        hits, queries = scrape.counters.get("prefix_hits"), scrape.counters.get("prefix_queries")
    prefix_frac = hits / queries if hits is not None and queries else None
    cache_frac = _cache_share(scrape, names.sources, delta)

    ttft, itl, e2e, queue, prefill = (
        _Hist(window, key, window_s) for key in ("ttft", "itl", "e2e", "queue_time", "prefill_time")
    )
    mean_prompt = _window_mean(window, "prompt_len", window_s)
    mean_gen = _window_mean(window, "generation_len", window_s)
    if mean_prompt is None or mean_gen is None:
        mean_prompt = _cumulative_mean(scrape, "prompt_len")
        mean_gen = _cumulative_mean(scrape, "generation_len")
    ttft_p50, ttft_p95, ttft_p99 = ttft.quantiles(0.5, 0.95, 0.99)
    itl_p50, itl_p95, itl_p99 = itl.quantiles(0.5, 0.95, 0.99)
    (e2e_p95,) = e2e.quantiles(0.95)
    queue_p50, queue_p95 = queue.quantiles(0.5, 0.95)

    f = field_figures(deltas, span, window, window_s)
    found = scrape.labelled_families
    return EngineStats(
        url=url,
        up=True,
        model=scrape.model,
        version=version,
        engine=scrape.engine,
        engine_note=scrape.engine_note,
        running=running,
        waiting=g.get("waiting"),
        waiting_capacity=scrape.waiting_capacity,
        kv_cache_usage_frac=g.get("kv_usage"),
        kv_capacity_tokens=scrape.kv_capacity_tokens,
        kv_block_size=scrape.kv_block_size,
        prompt_tok_per_s=rate("prompt_tokens"),
        decode_tok_per_s=decode,
        decode_tok_per_s_per_seq=per_seq,
        preemptions_per_s=rate("preemptions"),
        finished_per_s=finished,
        admission_rejections_per_s=rate("admission_rejections"),
        admission_rejections_by_reason_per_s=refused,
        prefix_cache_hit_frac=prefix_frac,
        mean_prompt_tokens=mean_prompt,
        mean_generation_tokens=mean_gen,
        longest_seq_tokens=scrape.counters.get("longest_seq_tokens"),
        ttft_p50_s=ttft_p50,
        ttft_p95_s=ttft_p95,
        ttft_p99_s=ttft_p99,
        itl_p50_s=itl_p50,
        itl_p95_s=itl_p95,
        itl_p99_s=itl_p99,
        e2e_p95_s=e2e_p95,
        queue_time_p50_s=queue_p50,
        queue_time_p95_s=queue_p95,
        error=None
        if running is not None
        else NO_GAUGES
        if scrape.engine in (None, "vllm")
        else NO_GAUGES_OTHER,
        ttft_mean_s=ttft.mean(),
        queue_time_mean_s=queue.mean(),
        prefill_time_mean_s=prefill.mean(),
        waiting_deferred=scrape.waiting_deferred,
        prompt_cache_hit_frac=cache_frac,
        prompt_computed_tok_per_s=rate("prompt_source:local_compute"),
        prefix_cache_queried_tok_per_s=rate("prefix_queries"),
        corrupted_per_s=rate("corrupted_requests"),
        spec_acceptance_frac=f.spec_acceptance_frac,
        spec_mean_accepted_len=f.spec_mean_accepted_len,
        spec_acceptance_by_pos=f.spec_acceptance_by_pos,
        spec_drafts_per_s=f.spec_drafts_per_s,
        lora=found.lora if found is not None else None,
        kv_transfer_bytes_per_s=f.kv_transfer_bytes_per_s,
        kv_transfer_failures_per_s=f.kv_transfer_failures_per_s,
        kv_transfer_time_mean_s=f.kv_transfer_time_mean_s,
        sleep_state=found.sleep_state if found is not None else None,
        healthy=found.healthy if found is not None else None,
        unread=found.unread if found is not None else (),
        # last: a window of one step (the others' memo is spent by then)
        decode_tok_per_s_now=window.rate(("generation_tokens", None), 0.0),
    )


_TRANSFER_FAILURES = (
    "nixl_failed_transfers",
    "nixl_failed_notifications",
    "nixl_expired_requests",
    "kv_offload_failures",
)
_TRANSFER_BYTES = ("kv_offload_load_bytes", "kv_offload_store_bytes")


LEVEL_WINDOW_S = 4.0
"""The prefix cache's hit rate and speculative decoding's figures cover the last few seconds,
not the whole window: when the window's older part held many times more of the traffic
(greedy drafts before sampled ones, shared prompts before new ones), its level would hide a
fall for as long as that part stays in it."""


class FieldFigures(NamedTuple):
    """The field guide's windowed figures; each None when its family is not exported."""

    spec_acceptance_frac: float | None = None
    spec_mean_accepted_len: float | None = None
    spec_acceptance_by_pos: tuple[float, ...] = ()
    spec_drafts_per_s: float | None = None
    kv_transfer_bytes_per_s: float | None = None
    kv_transfer_failures_per_s: float | None = None
    kv_transfer_time_mean_s: float | None = None


def field_figures(
    deltas: dict[Key, float], span: float | None, window: CounterWindow, window_s: float
) -> FieldFigures:
    """Speculative decoding's acceptance and the KV connector's traffic over the window."""
    if not span:
        return FieldFigures()
    spec = window.counter_deltas(min(window_s, LEVEL_WINDOW_S))
    spec_span = window.span_s(min(window_s, LEVEL_WINDOW_S)) or span
    drafts = spec.get(("spec_drafts", None))
    proposed = spec.get(("spec_draft_tokens", None))
    accepted = spec.get(("spec_accepted_tokens", None))
    by_pos: tuple[float, ...] = ()
    if drafts and accepted is not None:
        pos = sorted(
            (int(k[0].partition(":")[2]), v)
            for k, v in spec.items()
            if k[0].startswith("spec_pos:") and k[0].partition(":")[2].isdigit()
        )
        by_pos = tuple(v / drafts for _, v in pos)
    failures = [deltas[(k, None)] for k in _TRANSFER_FAILURES if (k, None) in deltas]
    moved = [deltas[(k, None)] for k in _TRANSFER_BYTES if (k, None) in deltas]
    nixl_bytes = window.delta(("h:nixl_bytes", "sum"), window_s)
    if nixl_bytes is not None:
        moved.append(nixl_bytes)
    xfer_sum = window.delta(("h:nixl_xfer_time", "sum"), window_s)
    xfer_count = window.delta(("h:nixl_xfer_time", "count"), window_s)
    return FieldFigures(
        spec_acceptance_frac=accepted / proposed if proposed and accepted is not None else None,
        spec_mean_accepted_len=1.0 + accepted / drafts if drafts and accepted is not None else None,
        spec_acceptance_by_pos=by_pos,
        spec_drafts_per_s=None if drafts is None else drafts / spec_span,
        kv_transfer_bytes_per_s=sum(moved) / span if moved else None,
        kv_transfer_failures_per_s=sum(failures) / span if failures else None,
        kv_transfer_time_mean_s=xfer_sum / xfer_count
        if xfer_sum is not None and xfer_count
        else None,
    )


def _cache_share(
    scrape: EngineScrape, sources: list[str], delta: Callable[[str], float | None]
) -> float | None:
    """Cache-hit share of the prompt tokens by source over the window (else since start)."""
    if not sources:
        return None
    hit_key = "prompt_source:local_cache_hit"
    deltas = {k: delta(k) for k in sources}
    total = sum(d for d in deltas.values() if d is not None)
    if total > 0 and deltas.get(hit_key) is not None:
        return (deltas[hit_key] or 0.0) / total
    total = sum(scrape.counters[k] for k in sources)
    return scrape.counters.get(hit_key, 0.0) / total if total > 0 else None
