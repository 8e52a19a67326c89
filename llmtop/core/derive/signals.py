"""The engine between two scrapes (`EngineScrape`s -> `EngineSignals`): what the autopilot steps
on. Pure. Units in the names; None is unknown (not exported, or the first scrape), never zero:
the controller holds its budget on it. A counter that went down was reset and counts from zero
(as `series.CounterWindow`); `fleet_signals` adds up the replicas one gateway's budget spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmtop.core.derive.histogram import histogram_quantile
from llmtop.core.vllm.scrape import EngineScrape, Histogram


@dataclass(frozen=True)
class EngineSignals:
    """One scrape interval of an engine (or of the replicas behind one gateway, added up).

    Gauges are the newer scrape's; counters are increases over the interval; histograms are
    the interval's own observations (cumulative buckets, sum and count), not the whole run's.
    """

    interval_s: float
    """Seconds between the two scrapes."""
    kv_capacity_blocks: int | None
    """The KV cache in blocks (`vllm:cache_config_info` num_gpu_blocks, engines added)."""
    kv_block_size: int | None
    """Tokens per KV block."""
    kv_usage_frac: float | None
    """KV cache in use, 0..1: the engines' mean weighted by their capacity."""
    kv_usage_frac_waiting: float | None
    """The highest KV use among the engines with a request waiting; None when none waits.
    "Waiting at a full cache" reads the full engine, not the mean of several."""
    running: float | None
    """Requests the engine runs (`vllm:num_requests_running`)."""
    waiting: float | None
    """Requests waiting inside the engine (`vllm:num_requests_waiting`)."""
    preemptions: float | None
    """Preemptions in the interval (vLLM ran out of KV blocks and set work back)."""
    prompt_tokens: float | None
    """Prompt tokens the engine counted in the interval (computed, cached or transferred)."""
    prompt_computed_tokens: float | None
    """Of those, the ones actually prefilled (`prompt_tokens_by_source{local_compute}`, vLLM
    >= 0.16; None before): the prefill work a prefill-aware budget weighs."""
    generation_tokens: float | None
    """Tokens generated in the interval."""
    ttft_s_hist: Histogram | None
    """Time to first token, seconds, of the requests answered in the interval."""
    itl_s_hist: Histogram | None
    """Inter-token latency, seconds, of the tokens of the interval."""
    prefill_s_hist: Histogram | None
    """Prefill time, seconds (scheduled -> first token, `vllm:request_prefill_time_seconds`),
    of the requests whose prefill ended in the interval."""
    output_tokens_hist: Histogram | None
    """Generated tokens per request, of the requests that finished in the interval (its
    buckets only where the scrape kept them: `names.sample_names(bucketed=...)`)."""

    def _per_s(self, n: float | None) -> float | None:
        return None if n is None or self.interval_s <= 0 else n / self.interval_s

    @property
    def preemptions_per_s(self) -> float | None:
        """Preemptions per second over the interval."""
        return self._per_s(self.preemptions)

    @property
    def prompt_tok_per_s(self) -> float | None:
        """Prompt tokens per second over the interval."""
        return self._per_s(self.prompt_tokens)

    @property
    def generation_tok_per_s(self) -> float | None:
        """Generated tokens per second over the interval."""
        return self._per_s(self.generation_tokens)

    @property
    def ttft_p95_s(self) -> float | None:
        """TTFT p95 of the interval's requests (histogram_quantile); None when none."""
        return _quantile(self.ttft_s_hist, 0.95)

    @property
    def itl_p95_s(self) -> float | None:
        """ITL p95 of the interval's tokens; None when none."""
        return _quantile(self.itl_s_hist, 0.95)

    @property
    def itl_mean_s(self) -> float | None:
        """Mean ITL of the interval's tokens (Δsum/Δcount); None when none."""
        return mean(self.itl_s_hist)

    @property
    def prefill_mean_s(self) -> float | None:
        """Mean prefill time of the interval's requests; None when none."""
        return mean(self.prefill_s_hist)


def _quantile(h: Histogram | None, q: float) -> float | None:
    return None if h is None else histogram_quantile(q, h.buckets)


def mean(h: Histogram | None) -> float | None:
    """A histogram's mean observation (sum / count); None when it holds none."""
    return h.sum / h.count if h is not None and h.count > 0 else None


def increase(new: float | None, old: float | None) -> float | None:
    """A counter's increase between two reads; a counter that went down was reset and counts
    from zero (its new value). None when either read does not have it."""
    if new is None or old is None:
        return None
    return new - old if new >= old else new


def histogram_increase(new: Histogram | None, old: Histogram | None) -> Histogram | None:
    """A histogram's observations between two reads (None: `new` does not have it). A bucket
    or the count that went down resets all of it (the new values); one that appeared since
    `old` counts from zero."""
    if new is None or old is None:
        return new
    before = dict(old.buckets)
    buckets = tuple((le, c - before.get(le, 0.0)) for le, c in new.buckets)
    if new.count < old.count or any(c < 0 for _, c in buckets):
        return new
    return Histogram(buckets, new.sum - old.sum, new.count - old.count)


def signals(new: EngineScrape, old: EngineScrape | None, interval_s: float) -> EngineSignals:
    """One engine's interval between `old` and `new` (`old` None, the first scrape: the gauges
    only, every increase None)."""
    g = new.gauges
    size = new.kv_block_size
    cap = new.kv_capacity_tokens
    blocks = cap // size if cap is not None and size else None

    def counted(key: str) -> float | None:
        return None if old is None else increase(new.counters.get(key), old.counters.get(key))

    def observed(key: str) -> Histogram | None:
        return (
            None
            if old is None
            else histogram_increase(new.histograms.get(key), old.histograms.get(key))
        )

    return EngineSignals(
        interval_s=interval_s,
        kv_capacity_blocks=blocks,
        kv_block_size=size,
        kv_usage_frac=g.get("kv_usage"),
        kv_usage_frac_waiting=new.kv_usage_frac_waiting,
        running=g.get("running"),
        waiting=g.get("waiting"),
        preemptions=counted("preemptions"),
        prompt_tokens=counted("prompt_tokens"),
        prompt_computed_tokens=counted("prompt_source:local_compute"),
        generation_tokens=counted("generation_tokens"),
        ttft_s_hist=observed("ttft"),
        itl_s_hist=observed("itl"),
        prefill_s_hist=observed("prefill_time"),
        output_tokens_hist=observed("generation_len"),
    )


def _total(values: Sequence[float | None]) -> float | None:
    """The sum of figures that must all be known (one unknown replica makes it unknown)."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def add_histograms(parts: Sequence[Histogram | None]) -> Histogram | None:
    """Histograms of several engines as one, bucket by bound (vLLM's bounds are the same
    everywhere); None when any is unknown."""
    if not parts or any(p is None for p in parts):
        return None
    acc: dict[float, float] = {}
    total = count = 0.0
    for p in parts:
        if p is None:
            continue
        for le, c in p.buckets:
            acc[le] = acc.get(le, 0.0) + c
        total += p.sum
        count += p.count
    return Histogram(tuple(sorted(acc.items())), total, count)


def _tokens(s: EngineSignals) -> float | None:
    if s.kv_capacity_blocks is None or s.kv_block_size is None:
        return None
    return float(s.kv_capacity_blocks * s.kv_block_size)


def fleet_signals(
    pairs: Sequence[tuple[EngineScrape, EngineScrape | None]], interval_s: float
) -> EngineSignals:
    """Several replicas behind one gateway as one engine: capacity, queues, increases and
    histograms add up (each replica's interval on its own, so a restart counts from zero there),
    KV use is the capacity-weighted mean, "full with a queue" the fullest replica with one, the
    capacity in blocks of the first replica's size. A figure one replica lacks is unknown for
    all: a sum without it would read that replica's share as zero."""
    each = [signals(new, old, interval_s) for new, old in pairs]
    if len(each) == 1:
        return each[0]
    tokens = [_tokens(s) for s in each]  # capacity in tokens: block sizes may differ
    size = each[0].kv_block_size
    cap = _total(tokens)
    kv = None
    usage = [s.kv_usage_frac for s in each]
    if cap and None not in usage:
        kv = sum((u or 0.0) * (t or 0) for u, t in zip(usage, tokens, strict=True)) / cap
    full = [s.kv_usage_frac_waiting for s in each if s.kv_usage_frac_waiting is not None]
    return EngineSignals(
        interval_s=interval_s,
        kv_capacity_blocks=int(cap) // size if cap is not None and size else None,
        kv_block_size=size if cap is not None else None,
        kv_usage_frac=kv,
        kv_usage_frac_waiting=max(full) if full else None,
        running=_total([s.running for s in each]),
        waiting=_total([s.waiting for s in each]),
        preemptions=_total([s.preemptions for s in each]),
        prompt_tokens=_total([s.prompt_tokens for s in each]),
        prompt_computed_tokens=_total([s.prompt_computed_tokens for s in each]),
        generation_tokens=_total([s.generation_tokens for s in each]),
        ttft_s_hist=add_histograms([s.ttft_s_hist for s in each]),
        itl_s_hist=add_histograms([s.itl_s_hist for s in each]),
        prefill_s_hist=add_histograms([s.prefill_s_hist for s in each]),
        output_tokens_hist=add_histograms([s.output_tokens_hist for s in each]),
    )
