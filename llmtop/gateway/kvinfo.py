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

from llmtop.core import promtext
from llmtop.errors import ScrapeError

Buckets = tuple[tuple[float, float], ...]
"""Cumulative (upper bound, count) pairs, +Inf last, as a Prometheus histogram has them."""

_GAUGES = {
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv_usage",
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
    {*_GAUGES, *_HISTS, "vllm:cache_config_info", "vllm:gpu_cache_usage_perc"}
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
    """The autopilot's figures from one vLLM /metrics body; ScrapeError if it is not one."""
    samples = promtext.parse(text, keep=_KEEP)
    values: dict[str, float] = {}
    hists: dict[str, dict[float, float]] = {k: {} for k in _HISTS.values()}
    blocks = size = None
    usage_old: float | None = None
    for s in samples:
        labels = dict(s.labels)
        if s.name == "vllm:cache_config_info":
            blocks = blocks or _int_label(labels, "num_gpu_blocks")
            size = size or _int_label(labels, "block_size")
        elif s.name in _GAUGES:
            key = _GAUGES[s.name]
            values[key] = values.get(key, 0.0) + s.value  # summed over engines (DP)
        elif s.name == "vllm:gpu_cache_usage_perc":
            usage_old = s.value
        elif s.name in _HISTS:
            le = labels.get("le")
            if le is None:
                continue
            bound = math.inf if le == "+Inf" else float(le)
            h = hists[_HISTS[s.name]]
            h[bound] = h.get(bound, 0.0) + s.value
    if "preemptions" not in values and blocks is None:
        raise ScrapeError("no vLLM series in the upstream's /metrics (is it vLLM?)")
    kv = values.get("kv_usage", usage_old if usage_old is not None else 0.0)
    return EngineScrape(
        num_gpu_blocks=blocks,
        block_size=size,
        preemptions=values.get("preemptions", 0.0),
        waiting=values.get("waiting", 0.0),
        running=values.get("running", 0.0),
        kv_usage=kv,
        prompt_tokens=values.get("prompt_tokens", 0.0),
        ttft=tuple(sorted(hists["ttft"].items())),
        itl=tuple(sorted(hists["itl"].items())),
        gen_tokens=tuple(sorted(hists["gen_tokens"].items())),
        itl_sum=values.get("itl_sum", 0.0),
        itl_count=values.get("itl_count", 0.0),
    )


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
    )


__all__ = [
    "Buckets",
    "EngineScrape",
    "EngineSignals",
    "ScrapeError",
    "bucket_delta",
    "parse_scrape",
    "quantile",
    "signals",
]
