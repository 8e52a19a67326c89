"""vLLM's metric names, old and new (vLLM 0.10 to 0.33), and the labels llmtop reads. Pure. Each
tuple lists the newer name first, which wins when both are exported: `kv_cache_usage_perc`
(`gpu_cache_usage_perc` before 0.9 and on V0), `inter_token_latency_seconds`
(`time_per_output_token_seconds` before 0.10.2), `prefix_cache_*` (`gpu_prefix_cache_*`).
"""

from __future__ import annotations

from collections.abc import Iterable

from llmtop.core.base.raw import Labels

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
    # the field guide's families (vLLM 0.12+; see `field` for the labelled ones)
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    "corrupted_requests": ("vllm:corrupted_requests_total",),
    "nixl_failed_transfers": ("vllm:nixl_num_failed_transfers_total",),
    "nixl_failed_notifications": ("vllm:nixl_num_failed_notifications_total",),
    "nixl_expired_requests": ("vllm:nixl_num_kv_expired_reqs_total",),
    "kv_offload_failures": ("vllm:kv_offload_allocation_failure_total",),
    "kv_offload_load_bytes": ("vllm:kv_offload_load_bytes_total",),
    "kv_offload_store_bytes": ("vllm:kv_offload_store_bytes_total",),
    "kv_offload_load_time_s": ("vllm:kv_offload_load_time_total",),
    "kv_offload_store_time_s": ("vllm:kv_offload_store_time_total",),
    # no vLLM family: llama.cpp's longest sequence (prompt + generation) so far, a counter
    # that only rises, mapped here by its dialect (the queue-wait estimate's request length)
    "longest_seq_tokens": ("llmtop:longest_seq_tokens_total",),
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
    "nixl_xfer_time": ("vllm:nixl_xfer_time_seconds",),
    "nixl_bytes": ("vllm:nixl_bytes_transferred",),
}


MEAN_ONLY = frozenset({"prompt_len", "generation_len", "nixl_bytes"})
"""Histograms the monitor reads for their mean only (Δsum/Δcount): their buckets are left out
of its keep-list (`sample_names(bucketed=...)` keeps them for a reader that needs them)."""
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
"""Accepted draft tokens by `position` (0 = the first draft token): acceptance per position."""
CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
"""0.32+: cached prompt tokens by tier (`source`: device, host, p2p, disk, external_unspecified)."""
SLEEP_STATE = "vllm:engine_sleep_state"
"""0.12+: one gauge per `sleep_state` (awake, weights_offloaded, discard_all), 1 for the state."""
ENGINE_HEALTHY = "vllm:engine_healthy"
"""1 healthy, 0 not; not in vLLM 0.32's source (read where a build exports it)."""
LORA_INFO = "vllm:lora_requests_info"
"""An info gauge (value: the wall-clock time it was set) whose labels `max_lora`,
`running_lora_adapters`, `waiting_lora_adapters` say the adapters' state; a new series per
state change, the newest by value the current one."""
LABELLED_FAMILIES = frozenset(
    {SPEC_PER_POS, CACHED_BY_SOURCE, SLEEP_STATE, ENGINE_HEALTHY, LORA_INFO}
)
"""The labelled families `labelled.read_labelled` reads beside the plan (absent on most engines)."""
ITERATION_TOKENS = "vllm:iteration_tokens_total"
"""Tokens per engine step (a histogram; its count is the number of steps): the what-if's."""


def sample_names(bucketed: Iterable[str] = ()) -> frozenset[str]:
    """Every sample name llmtop reads from a vLLM scrape (the parser's keep-list); `bucketed`:
    keys of `MEAN_ONLY` histograms whose buckets are read too (the autopilot's output lengths,
    the what-if's length distributions)."""
    names = {WAITING_BY_REASON, CACHE_CONFIG, FINISHED, PROMPT_BY_SOURCE, *LABELLED_FAMILIES}
    for group in (GAUGES, COUNTERS):
        for alternatives in group.values():
            names.update(alternatives)
    wanted = set(bucketed)
    for key, alternatives in HISTOGRAMS.items():
        for fam in alternatives:
            names.update((fam + "_sum", fam + "_count"))
            if key not in MEAN_ONLY or key in wanted:
                names.add(fam + "_bucket")
    return frozenset(names)


def label_value(labels: Labels, key: str) -> str | None:
    """The value of one label of a sample (None: the sample has no such label)."""
    for k, v in labels:
        if k == key:
            return v
    return None


def bucket_bound(value: str) -> float:
    """A bucket's `le` label as its upper bound (+Inf, Inf and inf are infinity)."""
    return float("inf") if value in ("+Inf", "Inf", "inf") else float(value)


def model_name(labels: list[Labels]) -> str | None:
    """The served model: the first `model_name` label among these label sets."""
    for ls in labels:
        model = label_value(ls, "model_name")
        if model is not None:
            return model
    return None


def blocks_by_engine(info: list[Labels]) -> dict[str, float]:
    """Engine label -> its num_gpu_blocks (engines whose value is unset are left out)."""
    out: dict[str, float] = {}
    for ls in info:
        try:
            out[label_value(ls, "engine") or ""] = float(label_value(ls, "num_gpu_blocks") or "")
        except ValueError:
            continue
    return out


def fullest_waiting(
    usage: Iterable[tuple[str, float]], waiting: Iterable[tuple[str, float]]
) -> float | None:
    """The highest KV use among the engines (by `engine` label) with a request waiting; None
    when none waits. `usage` and `waiting`: (engine label, value) of each gauge's samples."""
    queued: dict[str, float] = {}
    for engine, value in waiting:
        queued[engine] = queued.get(engine, 0.0) + value
    full = [u for engine, u in usage if queued.get(engine, 0.0) >= 1]
    return max(full) if full else None


def kv_capacity(info: list[Labels]) -> tuple[int | None, int | None]:
    """KV capacity in tokens summed over engines: num_gpu_blocks x block_size per engine."""
    total = 0
    block_size: int | None = None
    for ls in info:
        try:
            blocks = int(label_value(ls, "num_gpu_blocks") or "")
            size = int(label_value(ls, "block_size") or "")
        except ValueError:
            return None, None
        total += blocks * size
        block_size = size
    return (total or None), block_size
