"""The figures the findings read, as recording rules: the fleet source's own PromQL for them
(`core.promql.promql.Queries.figures`, so the TUI reading through Prometheus and an alert agree),
and the KV sizing of `core.health.kvsize` spelt in PromQL. Each is one series per replica (the
replica label), old and new vLLM names matched with `or`. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.alerts.spec import (
    HISTORY_S,
    RATE_SCRAPES,
    SIZE_LOOKBACK_S,
    AlertSpec,
    G,
    duration,
    number,
)
from llmtop.core.derive.derive import LEVEL_WINDOW_S
from llmtop.core.dialects.reverse import reverse
from llmtop.core.vllm.names import CACHE_CONFIG, COUNTERS, FINISHED

P = "llmtop:vllm_"
"""The recorded figures' prefix (Prometheus' `level:metric` naming)."""
DECODE_BANDS = tuple(2**i for i in range(11))
"""Running counts whose best per-sequence decode rate is kept (`decode-bound`): 1, 2, 4 ... 1024."""


@dataclass(frozen=True)
class Recorded:
    """One recording rule: its series name, its PromQL and what it is, in a word."""

    name: str
    expr: str
    doc: str


def counter_rate(spec: AlertSpec, *keys: str) -> str:
    """The per-second increase of vLLM's counters (by `COUNTERS` key) per replica, added; 0 for
    a replica that exports the running gauge but not the counter."""
    r, w = spec.r, duration(spec.window_s)
    zero = f"0 * max by ({r}) ({spec.vllm('vllm:num_requests_running')})"
    q = spec.queries
    return " + ".join(
        f"(sum by ({r}) ({q.over('rate', spec.vllm(*COUNTERS[k]), w)}) or on ({r}) {zero})"
        for k in keys
    )


def _label_number(spec: AlertSpec, label: str) -> str:
    """A numeric label of vLLM's cache_config_info as a value, per (replica, engine). PromQL
    has no label-to-number function, but a bucket at le=<the label's value> beside a +Inf
    bucket, both counting 1, has that value as its `histogram_quantile` 1-quantile. A value
    that is not a number ("None") makes no bucket, and the answer NaN (unknown)."""
    info = spec.vllm(CACHE_CONFIG)
    r = spec.r
    return (
        f"histogram_quantile(1, sum by ({r}, engine, le) ("
        f'label_replace({info}, "le", "$1", "{label}", "(.+)")'
        f' or label_replace({info}, "le", "+Inf", "", "")))'
    )


def _kv_rows(spec: AlertSpec) -> list[tuple[str, str, str]]:
    """The KV capacity in tokens and the tokens per KV block, as recorded rows: from vLLM's
    cache_config_info, or the engine's own gauges as the fleet's queries read them
    (`Queries.capacity`: SGLang's token pool, TensorRT-LLM's blocks x tokens per block; one
    token per block where the capacity is counted in tokens, SGLang's pages as llmtop reads
    them)."""
    r = spec.r
    own = reverse(spec.dialect).capacity if spec.dialect != "vllm" else None
    if own is None:
        capacity = (
            f"sum by ({r}) ({_label_number(spec, 'num_gpu_blocks')} * on ({r}, engine) "
            f"{_label_number(spec, 'block_size')})"
        )
        doc = "KV tokens: num_gpu_blocks x block_size of cache_config_info, summed over engines"
        size = f"max by ({r}) ({_label_number(spec, 'block_size')})"
    else:
        blocks, per_block = own
        q = spec.queries.capacity()
        capacity = q["kv_capacity"]
        if per_block is None:
            doc = f"KV tokens: {blocks}, summed over its ranks"
            size = f"max by ({r}) ({spec.vllm(blocks)}) * 0 + 1"
        else:
            doc = f"KV tokens: {blocks} x {per_block}"
            size = q["kv_block_size"]
    return [("kv_capacity_tokens", capacity, doc), ("kv_block_size", size, "tokens per KV block")]


def figures(spec: AlertSpec) -> tuple[Recorded, ...]:
    """The recording rules, in the order they are evaluated (each may read the ones before)."""
    q = spec.queries.figures((spec.r,))
    r, w, h, p = spec.r, duration(spec.window_s), spec.health, spec.p
    on = f"on ({r})"
    rated = spec.queries.over
    finished = f"sum by ({r}) ({rated('rate', spec.vllm(FINISHED), w)})"
    error = spec.vllm(FINISHED, extra='finished_reason="error"')
    errors = f"sum by ({r}) ({rated('rate', error, w)})"
    tokens = " + ".join(
        f"sum by ({r}) ({spec.vllm(*COUNTERS[k])})" for k in ("generation_tokens", "prompt_tokens")
    )
    held = duration(spec.at_least_interval(SIZE_LOOKBACK_S))
    slo = number(h.slo.ttft_s)
    rows = [
        ("running", q["running"], "requests running (vllm:num_requests_running)"),
        (
            "gateway_unanswered_seconds",
            _unanswered(spec),
            "the oldest request a gateway sent this engine that has no first byte yet",
        ),
        ("waiting", q["waiting"], "requests waiting in vLLM's queue"),
        ("waiting_for_capacity", q["waiting_capacity"], "waiting for KV capacity (0.20+)"),
        ("waiting_deferred", q["waiting_deferred"], "waiting for a LoRA, a KV transfer (0.20+)"),
        (
            "waiting_for_kv",
            f"{p}waiting_for_capacity or {p}waiting",
            "waiting for KV: by reason where vLLM says, else all waiting (as kv-exhausted reads)",
        ),
        ("kv_usage_frac", q["kv_usage"], "KV-cache usage, 0..1"),
        (
            "kv_usage_peak_frac",
            f"max_over_time({p}kv_usage_frac[{w}])",
            "the highest KV usage over the window: preemption frees blocks, so a full cache "
            "oscillates",
        ),
        ("prompt_tok_per_s", q["prompt_tokens"], "prompt tokens per second"),
        ("decode_tok_per_s", q["generation_tokens"], "generated tokens per second"),
        (
            "decode_tok_per_s_per_seq",
            f"{p}decode_tok_per_s / {on} ({p}running > 0)",
            "decode rate of each running sequence",
        ),
        ("preemptions_per_s", q["preemptions"], "preemptions per second"),
        ("ttft_p95_seconds", q["q_ttft_p95"], "time to first token, p95 over the window"),
        ("itl_p95_seconds", q["q_itl_p95"], "inter-token latency, p95 over the window"),
        ("ttft_mean_seconds", q["mean_ttft"], "mean TTFT over the window"),
        ("queue_time_mean_seconds", q["mean_queue_time"], "mean time in vLLM's queue"),
        ("prefill_time_mean_seconds", q["mean_prefill_time"], "mean prefill time"),
        ("prompt_tokens_mean", q["mean_prompt_len"], "mean prompt of the finished requests"),
        ("generation_tokens_mean", q["mean_generation_len"], "mean output of the finished"),
        ("finished_per_s", finished, "requests finished per second, any reason"),
        ("error_frac", f"{errors} / {on} ({p}finished_per_s > 0)", "share finished in error"),
        (
            "admission_rejections_per_s",
            f"sum by ({r}) ({rated('rate', spec.vllm(*COUNTERS['admission_rejections']), w)})",
            "vLLM's own 503s per second (--max-num-queued-reqs, 0.32+)",
        ),
        ("tokens_total", tokens, "tokens made since start: its moving is the engine's progress"),
        *_kv_rows(spec),
        (
            "kv_held_tokens_per_seq",
            f"{p}kv_usage_frac * {on} {p}kv_capacity_tokens / {on} ({p}running > 0)",
            "KV each running sequence holds: usage x capacity / running",
        ),
        (
            "kv_request_tokens",
            f"ceil(max by ({r}) ("
            f'label_replace(max_over_time({p}kv_held_tokens_per_seq[{held}]), "basis", "held", '
            '"", "")'
            f" or label_replace({p}prompt_tokens_mean + {on} {p}generation_tokens_mean or "
            f'{p}prompt_tokens_mean, "basis", "mean", "", "")))',
            "what a slot costs (kv_size): the larger of the mean prompt + output and the most "
            f"a running sequence held over {held}, whole tokens",
        ),
        (
            "kv_budget_tokens",
            f"floor({p}kv_capacity_tokens * {number(min(1.0, h.kv_target_frac))})",
            f"the KV tokens a cap may fill: kv_target_frac ({h.kv_target_frac:g}) of the cache",
        ),
        (
            "kv_fits",
            f"clamp_min(floor((floor({p}kv_budget_tokens / {on} {p}kv_block_size) - 1) / {on} "
            f"ceil({p}kv_request_tokens / {on} {p}kv_block_size)), 1)",
            "sequences that fit: (budget blocks - vLLM's null block) / blocks per request",
        ),
        (
            "slo_ratio",
            f"max by ({r}) ("
            f'label_replace({p}ttft_p95_seconds / {slo}, "figure", "ttft", "", "")'
            f' or label_replace({p}itl_p95_seconds / {number(h.slo.itl_s)}, "figure", "itl", '
            '"", "")'
            f" or label_replace({p}gateway_unanswered_seconds / {slo},"
            ' "figure", "unanswered", "", ""))',
            "the worst latency over its SLO: TTFT p95, ITL p95, and the gateway's oldest "
            "request at the engine without a first token",
        ),
        (
            "decode_tok_per_s_per_seq_by_running",
            " or ".join(
                f"label_replace({p}decode_tok_per_s_per_seq and {on} {p}running <= {k}, "
                f'"running_le", "{k}", "", "")'
                for k in DECODE_BANDS
            ),
            "the per-sequence decode rate, once for each band of running counts it is in",
        ),
        (
            "decode_tok_per_s_per_seq_best_at_half",
            f"max by ({r}) (max_over_time({p}decode_tok_per_s_per_seq_by_running"
            f"[{duration(spec.at_least_interval(HISTORY_S))}]) and on ({r}, running_le) ("
            + " or ".join(
                f'label_replace({p}running >= {2 * k} < {4 * k}, "running_le", "{k}", "", "")'
                for k in DECODE_BANDS
            )
            + "))",
            "the best per-sequence decode rate of the last ten minutes at half the running now "
            "or fewer (the band below: a power of two)",
        ),
    ]
    out = _upstream(spec) if spec.gateway_part else []
    out += [Recorded(spec.p + name, expr, doc) for name, expr, doc in rows]
    out += _field_side(spec) + _gateway_side(spec)
    return tuple(out)


UPSTREAM = "llmtop:gateway_upstream"


def _upstream(spec: AlertSpec) -> list[Recorded]:
    """Which engines each gateway sends to, when replicas are named by `instance` (its replica
    URLs' host:port): how a gateway's figures are joined to its engines' (none otherwise)."""
    if spec.r != "instance":
        return []
    inflight = spec.gateway(G + "replica_in_flight")
    return [
        Recorded(
            UPSTREAM,
            "max by (gateway, instance) (label_replace(label_replace("
            f'{inflight}, "gateway", "$1", "instance", "(.*)"), '
            '"instance", "$1", "replica", "https?://([^/]+).*")) * 0 + 1',
            "1 for each (gateway, the host:port of an engine it sends to)",
        )
    ]


def level_window_s(spec: AlertSpec) -> float:
    """The prefix hit rate's and spec acceptance's window: llmtop's last `LEVEL_WINDOW_S` (each
    swings with the requests of the moment), or more scrapes when they are sparser."""
    return max(min(spec.health.window_s, LEVEL_WINDOW_S), RATE_SCRAPES * spec.interval_s)


def _field_side(spec: AlertSpec) -> list[Recorded]:
    """The prefix cache's hit rate and speculative decoding's acceptance, each only while it is
    used (queries, drafts made), as derive reads them: their look-backs range over these."""
    r = spec.r
    sw = duration(level_window_s(spec))

    from llmtop.core.promql.promql import alternatives  # `llmtop rules` only (spec.queries)

    def rate(key: str, over: str) -> str:
        found = alternatives(spec.queries.selectors(n) for n in COUNTERS[key])  # newest first
        rated = " or ".join(spec.queries.over("rate", x, over) for x in found)
        return f"sum by ({r}) ({rated})"

    drafting = f"{rate('spec_drafts', sw)} > 0"
    return [
        Recorded(
            spec.p + "prefix_cache_hit_frac",
            f"{rate('prefix_hits', sw)} / on ({r}) ({rate('prefix_queries', sw)} > 0)",
            "prefix-cache hits per token queried over the last seconds, while queries flow",
        ),
        Recorded(
            spec.p + "spec_acceptance_frac",
            f"({rate('spec_accepted_tokens', sw)} / on ({r}) "
            f"({rate('spec_draft_tokens', sw)} > 0)) and on ({r}) ({drafting})",
            f"draft tokens accepted per draft token over the last {sw}, while drafts are made",
        ),
    ]


def _unanswered(spec: AlertSpec) -> str:
    """The gateway's oldest request without a first byte, put on the engines it sends to (on
    every engine under the selector when that join cannot be made)."""
    r = spec.r
    oldest = spec.gateway(G + "oldest_unanswered_seconds")
    if r == "instance":
        by_gateway = (
            f'max by (gateway) (label_replace({oldest}, "gateway", "$1", "instance", "(.*)"))'
        )
        return f"max by (instance) ({UPSTREAM} * on (gateway) group_left () {by_gateway})"
    each = f"max by ({r}) ({spec.vllm('vllm:num_requests_running')}) * 0"
    return f"{each} + on () group_left () max({oldest})"


def _every(spec: AlertSpec, name: str) -> str:
    """A recorded figure of every engine of the file: this one's, or (several engines) each
    one's joined with `or` (each group records its own engines' figures under its prefix)."""
    kinds = (spec.dialect, *spec.beside)
    if len(kinds) == 1:
        return spec.p + name
    return "(" + " or ".join(f"llmtop:{k}_{name}" for k in kinds) + ")"


def _gateway_side(spec: AlertSpec) -> list[Recorded]:
    """What the engines behind each gateway hold together, one series per gateway (labelled as
    its alerts are): what the gateway's rules weigh its cap against, as the TUI weighs it
    against the engines it watches. With replicas named by `instance`, a gateway's engines are
    those its replica list names (llmtop_gateway_replica_in_flight's URLs, host:port); with
    another replica label that join cannot be made, and every engine under the selector counts."""
    h, r = spec.health, spec.r
    on = f"on ({r})"
    roomy = Recorded(
        spec.p + "kv_roomy",
        f"({spec.p}kv_usage_frac < bool {number(h.kv_high_frac)}) * {on} "
        f"({spec.p}waiting == bool 0) * {on} ({spec.p}preemptions_per_s == bool 0)",
        "1 when the engine has KV headroom: below kv_high_frac, 0 waiting, no preemption",
    )
    parts = {
        "kv_fits": ("sum", "sequences the KV caches hold together (when every engine is sized)"),
        "kv_roomy": ("min", "1 when every engine has KV headroom"),
        "kv_usage_frac": ("max", "the fullest KV cache"),
        "waiting": ("sum", "requests waiting in the engines"),
    }
    queued = Recorded(
        "llmtop:gateway_queued",
        f"sum by ({r}) ({spec.gateway(G + 'queued')})",
        "requests waiting in each gateway's queue, every priority",
    )
    if not spec.gateway_part:
        return [roomy]
    out = [roomy, queued]
    if r == "instance":
        u = UPSTREAM
        for name, (agg, doc) in parts.items():
            joined = f"{u} * on (instance) group_left () {_every(spec, name)}"
            expr = f"{agg} by (gateway) ({joined})"
            if name == "kv_fits":
                expr += (
                    f" and on (gateway) (count by (gateway) ({joined}) == count by (gateway) ({u}))"
                )
            out.append(
                Recorded(
                    "llmtop:gateway_" + name,
                    f'max without (gateway) (label_replace({expr}, "instance", "$1", '
                    '"gateway", "(.*)"))',
                    f"{doc}, behind each gateway",
                )
            )
        return out
    each = f"max by ({r}) ({spec.gateway(G + 'in_flight')}) * 0"
    for name, (agg, doc) in parts.items():
        whole = f"{agg}({_every(spec, name)})"
        if name == "kv_fits":
            whole += (
                f" and on () (count({_every(spec, 'kv_fits')}) == count({_every(spec, 'running')}))"
            )
        out.append(
            Recorded(
                "llmtop:gateway_" + name,
                f"{each} + on () group_left () ({whole})",
                f"{doc}, every engine under the selector, for each gateway",
            )
        )
    return out
