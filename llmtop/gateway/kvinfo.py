"""What the autopilot reads from the upstream's /metrics: KV capacity and the congestion signals.

Pure: exposition text in, figures out; the app fetches the text about once a second. vLLM
names (vLLM's metrics docs, 0.10 to 0.33): the capacity is `vllm:cache_config_info`'s labels
num_gpu_blocks x block_size; preemptions, waiting, running and KV usage are its counters and
gauges; TTFT, ITL and generated tokens per request are histograms, read as the change between
two scrapes (the interval's own distribution, not the whole run's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmtop.core.exposition import promtext
from llmtop.errors import ScrapeError

Buckets = tuple[tuple[float, float], ...]
"""Cumulative (upper bound, count) pairs, +Inf last, as a Prometheus histogram has them."""

_GAUGES = {
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:inter_token_latency_seconds_sum": "itl_sum",
    "vllm:inter_token_latency_seconds_count": "itl_count",
}
_HISTS = {
    "vllm:time_to_first_token_seconds_bucket": "ttft",
    "vllm:inter_token_latency_seconds_bucket": "itl",
    "vllm:request_generation_tokens_bucket": "gen_tokens",
}
_KEEP = promtext.keep_names(
    {
        *_GAUGES,
        *_HISTS,
        "vllm:cache_config_info",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    }
)


@dataclass(frozen=True)
class EngineScrape:
    """One /metrics read: the engine's KV geometry and its cumulative counters."""

    num_gpu_blocks: int | None
    block_size: int | None
    preemptions: float
    waiting: float
    running: float
    kv_usage: float
    prompt_tokens: float
    ttft: Buckets
    itl: Buckets
    gen_tokens: Buckets
    itl_sum: float = 0.0
    itl_count: float = 0.0
    kv_usage_waiting: float | None = None
    """The highest KV use among its engines with requests waiting; None when none waits."""

    @property
    def capacity_tokens(self) -> int | None:
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        v = int(labels[key])
    except (KeyError, ValueError):
        return None
    return v if v > 0 else None


def parse_scrape(text: str) -> EngineScrape:
    """The autopilot's figures from one vLLM /metrics body; ScrapeError if it is not one.

    A data-parallel server has one engine per `engine` label: its capacity and counters are the
    engines' sums, its KV use their capacity-weighted mean (a sum would pass 100 %)."""
    samples = promtext.parse(text, keep=_KEEP)
    values: dict[str, float] = {}
    hists: dict[str, dict[float, float]] = {k: {} for k in _HISTS.values()}
    blocks: dict[str, int] = {}  # per engine label
    size: int | None = None
    usage: dict[str, float] = {}
    usage_old: dict[str, float] = {}
    waiting: dict[str, float] = {}
    for s in samples:
        labels = dict(s.labels)
        engine = labels.get("engine", "")
        if s.name == "vllm:cache_config_info":
            n = _int_label(labels, "num_gpu_blocks")
            if n is not None:
                blocks.setdefault(engine, n)
            size = size or _int_label(labels, "block_size")
        elif s.name == "vllm:kv_cache_usage_perc":
            usage[engine] = s.value
        elif s.name == "vllm:gpu_cache_usage_perc":
            usage_old[engine] = s.value
        elif s.name in _GAUGES:
            key = _GAUGES[s.name]
            values[key] = values.get(key, 0.0) + s.value  # summed over engines (DP)
            if key == "waiting":
                waiting[engine] = waiting.get(engine, 0.0) + s.value
        elif s.name in _HISTS:
            le = labels.get("le")
            if le is None:
                continue
            bound = math.inf if le == "+Inf" else float(le)
            h = hists[_HISTS[s.name]]
            h[bound] = h.get(bound, 0.0) + s.value
    if "preemptions" not in values and not blocks:
        raise ScrapeError("no vLLM series in the upstream's /metrics (is it vLLM?)")
    per_engine = usage or usage_old
    full = [u for e, u in per_engine.items() if waiting.get(e, 0.0) >= 1]
    return EngineScrape(
        num_gpu_blocks=sum(blocks.values()) or None,
        block_size=size,
        preemptions=values.get("preemptions", 0.0),
        waiting=values.get("waiting", 0.0),
        running=values.get("running", 0.0),
        kv_usage=_weighted(per_engine, blocks),
        prompt_tokens=values.get("prompt_tokens", 0.0),
        ttft=tuple(sorted(hists["ttft"].items())),
        itl=tuple(sorted(hists["itl"].items())),
        gen_tokens=tuple(sorted(hists["gen_tokens"].items())),
        itl_sum=values.get("itl_sum", 0.0),
        itl_count=values.get("itl_count", 0.0),
        kv_usage_waiting=max(full) if full else None,
    )


def _weighted(usage: dict[str, float], blocks: dict[str, int]) -> float:
    """KV use over engines, weighted by their capacity (equal weights where it is unknown)."""
    if not usage:
        return 0.0
    weights = {e: float(blocks.get(e, 0)) or 1.0 for e in usage}
    total = sum(weights.values())
    return sum(u * weights[e] for e, u in usage.items()) / total


def bucket_delta(new: Buckets, old: Buckets | None) -> Buckets:
    """The observations between two scrapes of one histogram (a restart counts from zero)."""
    if not old:
        return new
    before = dict(old)
    out = tuple((le, c - before.get(le, 0.0)) for le, c in new)
    if any(c < 0 for _, c in out):  # counters went back: the engine restarted
        return new
    return out


def quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """histogram_quantile over cumulative buckets: linear inside the bucket; None if empty.

    A quantile in the +Inf bucket answers the largest finite bound (as Prometheus does)."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return prev_le


@dataclass(frozen=True)
class EngineSignals:
    """The engine between two scrapes: what the controller steps on."""

    interval_s: float
    capacity_blocks: int | None
    block_size: int | None
    preempt_per_s: float
    waiting: float
    running: float
    kv_usage: float
    prompt_tokens: float
    """Prompt tokens the engine counted in the interval (the footprint's text correction)."""
    ttft_p95_s: float | None
    itl_p95_s: float | None
    itl_mean_s: float | None
    gen_tokens: Buckets
    """Generated tokens per finished request in the interval (cumulative buckets)."""
    kv_usage_waiting: float | None = None
    """The highest KV use among the engines with requests waiting (None: none waits); with
    several engines, the cut on "waiting at a full cache" looks at the full one, not the mean."""


def signals(new: EngineScrape, old: EngineScrape | None, interval_s: float) -> EngineSignals:
    """The interval between two scrapes (`old` None: the first scrape, no rates yet)."""
    dt = max(interval_s, 1e-9)
    if old is None:
        preempt = 0.0
        prompt = 0.0
        ttft: Buckets = ()
        itl: Buckets = ()
        gen: Buckets = ()
        itl_mean = None
    else:
        preempt = max(0.0, new.preemptions - old.preemptions) / dt
        prompt = max(0.0, new.prompt_tokens - old.prompt_tokens)
        ttft = bucket_delta(new.ttft, old.ttft)
        itl = bucket_delta(new.itl, old.itl)
        gen = bucket_delta(new.gen_tokens, old.gen_tokens)
        n = new.itl_count - old.itl_count
        itl_mean = (new.itl_sum - old.itl_sum) / n if n > 0 else None
    return EngineSignals(
        interval_s=interval_s,
        capacity_blocks=new.num_gpu_blocks,
        block_size=new.block_size,
        preempt_per_s=preempt,
        waiting=new.waiting,
        running=new.running,
        kv_usage=new.kv_usage,
        prompt_tokens=prompt,
        ttft_p95_s=quantile(ttft, 0.95),
        itl_p95_s=quantile(itl, 0.95),
        itl_mean_s=itl_mean,
        gen_tokens=gen,
        kv_usage_waiting=new.kv_usage_waiting,
    )


def _sum_buckets(parts: Sequence[Buckets]) -> Buckets:
    """Histograms of several engines as one (vLLM's bucket bounds are the same everywhere)."""
    acc: dict[float, float] = {}
    for part in parts:
        for le, c in part:
            acc[le] = acc.get(le, 0.0) + c
    return tuple(sorted(acc.items()))


def fleet_signals(
    pairs: Sequence[tuple[EngineScrape, EngineScrape | None]], interval_s: float
) -> EngineSignals:
    """Several replicas behind one gateway as one engine: the balancer spreads the budget over
    them, so capacity, queues and rates add up. Each replica's interval is taken on its own
    (a restart there counts from zero there), then summed; KV use is the capacity-weighted
    mean; "full with a queue" is the fullest replica that has one."""
    if len(pairs) == 1:
        return signals(pairs[0][0], pairs[0][1], interval_s)
    each = [signals(new, old, interval_s) for new, old in pairs]
    news = [new for new, _ in pairs]
    sized = [n for n in news if n.capacity_tokens is not None]
    block = next((n.block_size for n in sized), None)
    cap_blocks = sum(n.capacity_tokens or 0 for n in sized) // block if block else None
    cap_tokens = sum(n.capacity_tokens or 0 for n in sized)
    if cap_tokens:
        kv = sum(n.kv_usage * (n.capacity_tokens or 0) for n in sized) / cap_tokens
    else:
        kv = sum(n.kv_usage for n in news) / len(news)
    itl_n = itl_s = 0.0
    for n, o in pairs:
        if o is not None and n.itl_count > o.itl_count:  # a restarted replica has no interval
            itl_n += n.itl_count - o.itl_count
            itl_s += n.itl_sum - o.itl_sum
    ttft = _sum_buckets([bucket_delta(n.ttft, o.ttft) for n, o in pairs if o is not None])
    itl = _sum_buckets([bucket_delta(n.itl, o.itl) for n, o in pairs if o is not None])
    full = [s.kv_usage_waiting for s in each if s.kv_usage_waiting is not None]
    return EngineSignals(
        interval_s=interval_s,
        capacity_blocks=cap_blocks or None,
        block_size=block,
        preempt_per_s=sum(s.preempt_per_s for s in each),
        waiting=sum(s.waiting for s in each),
        running=sum(s.running for s in each),
        kv_usage=kv,
        prompt_tokens=sum(s.prompt_tokens for s in each),
        ttft_p95_s=quantile(ttft, 0.95),
        itl_p95_s=quantile(itl, 0.95),
        itl_mean_s=itl_s / itl_n if itl_n > 0 else None,
        gen_tokens=_sum_buckets([s.gen_tokens for s in each]),
        kv_usage_waiting=max(full) if full else None,
    )


__all__ = [
    "Buckets",
    "EngineScrape",
    "EngineSignals",
    "ScrapeError",
    "bucket_delta",
    "fleet_signals",
    "parse_scrape",
    "quantile",
    "signals",
]
