"""The engine findings as alerting rules: each mirrors its check in `core.health.rules_engine`
over the recorded figures (`figures`), with the same thresholds (`spec.health`). Pure.
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, duration, number
from llmtop.core.alerts.templates import computed, figure, open_replica, replica, value


def kv_arithmetic(spec: AlertSpec) -> str:
    """The sum behind the suggested cap, with the replica's figures (`KvSize.arithmetic`)."""
    target = f"{spec.health.kv_target_frac * 100:g}%"
    return (
        f"{figure(spec, P + 'kv_budget_tokens', 'tokens')} KV tokens ({target} target of "
        f"{figure(spec, P + 'kv_capacity_tokens', 'tokens')}) / "
        f"{figure(spec, P + 'kv_request_tokens', 'tokens')} tokens per request in "
        f"{figure(spec, P + 'kv_block_size', 'count')}-token blocks = "
        f"{figure(spec, P + 'kv_fits', 'count')} sequences fit"
    )


def cap_advice(n: str, why: str) -> str:
    """`cap_advice`'s words for a cap of `n` (a template printing it)."""
    return (
        f"{why}: cap concurrency at ~{n}: press - or :cap {n} in llmtop (gateway "
        f"max_concurrency), or restart vLLM with --max-num-seqs {n}"
    )


def _kv_pressed(spec: AlertSpec) -> str:
    """`kv_pressed`: the window's KV peak at its high mark, with preemptions or waiting."""
    on = f"on ({spec.r})"
    return (
        f"({P}kv_usage_peak_frac >= {number(spec.health.kv_high_frac)} and {on} "
        f"({P}preemptions_per_s > 0 or {on} {P}waiting_for_kv > 0))"
    )


def target_down(spec: AlertSpec) -> Alert:
    r = spec.r
    if spec.vllm_matchers:
        expr = f"max by ({r}) ({spec.vllm('up')}) == 0"
        which = "the targets the selector names"
    else:  # without a selector, `up` is every target: vLLM's are those that exported its series
        expr = (
            f"max by ({r}) (up) == 0 and on ({r}) "
            f"count by ({r}) (last_over_time(vllm:num_requests_running[1h]))"
        )
        which = "targets that exported vllm:num_requests_running in the last hour (no selector)"
    return Alert(
        "target-down",
        expr,
        f"vLLM at {replica(spec)} not answering its /metrics (up == 0)",
        "check the vLLM process and its log (still loading the model? crashed? wrong port?)",
        open_replica(spec),
        f"up == 0 for {which}; in a fleet this is also replica-down",
    )


def stats_disabled(spec: AlertSpec) -> Alert:
    r = spec.r
    return Alert(
        "stats-disabled",
        f"max by ({r}) ({spec.vllm('up')}) == 1 unless on ({r}) "
        f'count by ({r}) ({{__name__=~"vllm:.+",{spec.vllm_matchers}}})',
        f"{replica(spec)} answers but exports no vllm:* metrics: llmtop cannot see its load",
        "restart vLLM without --disable-log-stats (its /metrics then carries the vllm:* series)",
        open_replica(spec),
        "a target the vLLM selector names is up with no vllm:* series",
    )


def stale_data(spec: AlertSpec) -> Alert:
    after = duration(spec.at_least_interval(spec.health.stale_after_s))
    on = f"on ({spec.r})"
    return Alert(
        "stale-data",
        f"{P}running > 0 and {on} ({P}tokens_total - {P}tokens_total offset {after} == 0)",
        f"{replica(spec)}: {value('count')} running but no token generated for {after}: the "
        "engine is hung or its metrics are stale",
        "check the vLLM log for a stuck step or a dead engine core; restart it if hung",
        open_replica(spec),
        f"running > 0 and its token counters unchanged since {after} ago (stale_after_s)",
    )


def scheduler_stuck(spec: AlertSpec) -> Alert:
    h, on = spec.health, f"on ({spec.r})"
    after = duration(spec.at_least_interval(h.scheduler_stuck_after_s))
    return Alert(
        "scheduler-stuck",
        f"({P}waiting - {on} {P}waiting_deferred or {P}waiting) > 0"
        f" and {on} {P}running == 0"
        f" and {on} {P}kv_usage_frac < {number(h.kv_high_frac)}"
        f" and {on} ({P}tokens_total - {P}tokens_total offset {after} == 0)",
        f"{replica(spec)}: {value('count')} waiting, 0 running, KV "
        f"{figure(spec, P + 'kv_usage_frac', 'frac')} used, and no token generated in the "
        f"last {after} while its /metrics answers: the scheduler admits nothing",
        "restart vLLM (a stuck scheduler stays stuck, and /health still answers 200, so a "
        "liveness probe will not restart it); a gateway in front holds new requests meanwhile",
        open_replica(spec),
        "requests waiting (not deferred), none running, KV below kv_high_frac, token counters "
        f"unchanged since {after} ago (scheduler_stuck_after_s)",
    )


def kv_exhausted(spec: AlertSpec) -> Alert:
    fits = figure(spec, P + "kv_fits", "count")
    r, pressed = spec.r, _kv_pressed(spec)
    # the value is the worst latency over its SLO (-1 when unknown): the severity follows it
    slo = f"max by ({r}) ({P}slo_ratio)"
    return Alert(
        "kv-exhausted",
        f"({slo} and on ({r}) {pressed}) or on ({r}) ({pressed} * 0 - 1)",
        f"{replica(spec)}: KV cache {figure(spec, P + 'kv_usage_peak_frac', 'frac')} full, "
        f"{figure(spec, P + 'preemptions_per_s', 'rate')} preemptions/s, "
        f"{figure(spec, P + 'waiting_for_kv', 'count')} waiting for capacity, "
        f"{figure(spec, P + 'running', 'count')} running; {kv_arithmetic(spec)}",
        cap_advice(fits, "more sequences than the KV cache holds"),
        open_replica(spec),
        f"the window's KV peak >= kv_high_frac ({spec.health.kv_high_frac:g}) with "
        "preemptions or requests waiting for capacity; the cap is kv_size's. Severity by the "
        "SLO: critical over it, info inside it, warning when the latency is unknown (llmtop's "
        "warning for a rising p95 or a queue that will miss it is not expressed here)",
        severity=(
            "{{ if gt $value 1.0 }}critical{{ else if lt $value 0.0 }}warning"
            "{{ else }}info{{ end }}"
        ),
    )


def degraded_200(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    on = f"on ({r})"
    slo, itl = number(h.slo.ttft_s), number(h.slo.itl_s)
    degraded = f"({P}slo_ratio > 1 unless {on} {P}error_frac > {number(h.error_rate_max)})"
    ttft_over = f"({P}ttft_p95_seconds > {slo} or {on} {P}gateway_unanswered_seconds > {slo})"
    itl_over = f"({P}itl_p95_seconds > {itl})"
    queue = (
        f"({ttft_over} and {on} ({P}queue_time_mean_seconds / {on} {P}ttft_mean_seconds >= 0.5"
        f" or {on} {P}waiting > 0))"
    )
    tail = f"(({P}running > 0) / {on} ({P}decode_tok_per_s > 0) <= {itl})"
    itl_only = f"({degraded} and {on} {itl_over} unless {on} {ttft_over})"

    def named(expr: str, bottleneck: str) -> str:
        return f'label_replace({expr}, "bottleneck", "{bottleneck}", "", "")'

    expr = f"\nor {on} ".join(
        (
            named(f"{degraded} and {on} {_kv_pressed(spec)}", "kv"),
            named(f"{degraded} and {on} {queue}", "queue"),
            named(f"{itl_only} and {on} {tail}", "prefill"),
            named(itl_only, "decode"),
            named(degraded, "prefill"),
        )
    )
    running = figure(spec, P + "running", "count")
    decode_cap = computed(
        spec, f"clamp_min(floor({P}decode_tok_per_s{{{r}=%[1]q}} * {itl}), 1)", "count", "N"
    )
    queue_cap = computed(spec, f"clamp_min({P}running{{{r}=%[1]q}}, 1)", "count", "N")
    action = (
        '{{ if eq $labels.bottleneck "kv" }}'
        + cap_advice(figure(spec, P + "kv_fits", "count"), "KV cache is full")
        + f"; {kv_arithmetic(spec)}"
        + '{{ else if eq $labels.bottleneck "queue" }}'
        + cap_advice(queue_cap, "requests queue inside vLLM")
        + '{{ else if eq $labels.bottleneck "decode" }}'
        + cap_advice(decode_cap, "too many sequences share each decode step")
        + "{{ else }}prompts are expensive, or decode steps wait behind prefill chunks: cap "
        "in-flight prompt tokens at the gateway (max_inflight_prompt_tokens), enable prefix "
        "caching, or restart vLLM with a lower --max-num-batched-tokens{{ end }}"
    )
    return Alert(
        "degraded-200",
        expr,
        f"{replica(spec)}: TTFT p95 {figure(spec, P + 'ttft_p95_seconds', 'seconds')} (SLO "
        f"{h.slo.ttft_s:g}s), ITL p95 {figure(spec, P + 'itl_p95_seconds', 'seconds')} (SLO "
        f"{h.slo.itl_s:g}s), {value('number')}x its SLO, with ~0 errors; {running} running, "
        f"{figure(spec, P + 'waiting', 'count')} waiting",
        action,
        open_replica(spec),
        "TTFT p95, ITL p95 or the gateway's oldest unanswered request over its SLO while "
        "errors stay under error_rate_max; the bottleneck (a label) as llmtop names it: kv, "
        "queue, prefill (ITL tail with the mean within the SLO), decode, else prefill",
        severity=(
            f"{{{{ if ge $value {number(h.critical_slo_factor)} }}}}critical"
            "{{ else }}warning{{ end }}"
        ),
        bottleneck="",
    )


def batching_cliff(spec: AlertSpec) -> Alert:
    h, on = spec.health, f"on ({spec.r})"
    w = duration(spec.window_s)
    then = f"{P}decode_tok_per_s offset {w}"
    running = figure(spec, P + "running", "count")
    cap = computed(spec, f"clamp_min({P}running{{{spec.r}=%[1]q}}, 1)", "count", "N")
    return Alert(
        "batching-cliff",
        f"{P}waiting - {on} {P}waiting offset {w} >= {number(h.cliff_waiting_growth)}"
        f" and {on} abs({P}decode_tok_per_s - {on} {then})"
        f" <= {on} {number(h.cliff_flat_frac)} * {then}"
        f" and {on} {then} > 0",
        f"{replica(spec)}: waiting grew by {value('count')} in {w} while decode stays at "
        f"{figure(spec, P + 'decode_tok_per_s', 'rate')} tok/s with {running} running: more "
        "load only adds queueing",
        cap_advice(cap, "the engine is at its batch limit; queue in the gateway"),
        open_replica(spec),
        f"waiting up by cliff_waiting_growth ({h.cliff_waiting_growth:g}) over the window "
        f"while decode tok/s stays within cliff_flat_frac ({h.cliff_flat_frac:g})",
    )


def decode_bound(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    on = f"on ({r})"
    itl = number(h.slo.itl_s)
    cap = computed(
        spec, f"clamp_min(floor({P}decode_tok_per_s{{{r}=%[1]q}} * {itl}), 1)", "count", "N"
    )
    return Alert(
        "decode-bound",
        # ITL over its SLO or a mean ITL (running / decode) over it, and not a tail from
        # prefill chunks (a mean within it): both say running / decode > the ITL SLO
        f"{P}decode_tok_per_s_per_seq and {on} ({P}running > 0)"
        f" and {on} ({P}running / {on} {P}decode_tok_per_s > {itl})"
        f" and {on} {P}decode_tok_per_s_per_seq <= {on} "
        f"{number(h.decode_collapse_frac)} * {P}decode_tok_per_s_per_seq_best_at_half",
        f"{replica(spec)}: each sequence decodes at {value('rate')} tok/s with "
        f"{figure(spec, P + 'running', 'count')} running, down from "
        f"{figure(spec, P + 'decode_tok_per_s_per_seq_best_at_half', 'rate')} tok/s at half "
        f"that or fewer ({figure(spec, P + 'decode_tok_per_s', 'rate')} tok/s aggregate): "
        "decode steps are memory-bound",
        cap_advice(cap, f"to keep ITL under {h.slo.itl_s:g}s"),
        open_replica(spec),
        "the per-sequence decode rate at or under decode_collapse_frac "
        f"({h.decode_collapse_frac:g}) of its best at half the running or fewer, with a mean "
        "ITL over its SLO. The best is looked up in bands of powers of two (the band at or "
        "below half the running now), so it may be lower than llmtop's and fire later",
    )


def prefill_bound(spec: AlertSpec) -> Alert:
    h, on = spec.health, f"on ({spec.r})"
    return Alert(
        "prefill-bound",
        f"{P}prefill_time_mean_seconds / {on} ({P}ttft_mean_seconds > 0)"
        f" >= {number(h.prefill_dominant_frac)}"
        f" and {on} {P}ttft_p95_seconds > {number(h.slo.ttft_s)}",
        f"{replica(spec)}: prefill is {value('frac')} of TTFT (mean "
        f"{figure(spec, P + 'prefill_time_mean_seconds', 'seconds')} of "
        f"{figure(spec, P + 'ttft_mean_seconds', 'seconds')}; TTFT p95 "
        f"{figure(spec, P + 'ttft_p95_seconds', 'seconds')}) at "
        f"{figure(spec, P + 'prompt_tok_per_s', 'rate')} prompt tok/s, mean prompt "
        f"{figure(spec, P + 'prompt_tokens_mean', 'count')} tokens",
        "long prompts bind: cap in-flight prompt tokens at the gateway "
        "(max_inflight_prompt_tokens), enable prefix caching for shared prefixes, or lower "
        "--max-num-batched-tokens so chunked prefill interleaves with decode",
        open_replica(spec),
        "TTFT p95 over its SLO with prefill at least prefill_dominant_frac "
        f"({h.prefill_dominant_frac:g}) of the mean TTFT",
    )


def vllm_admission(spec: AlertSpec) -> Alert:
    r, w = spec.r, duration(spec.window_s)
    refused = spec.gateway(
        "llmtop_gateway_upstream_errors_total",
        'reason=~"engine_queue_full|engine_token_backlog|max_num_queued_reqs|'
        'max_num_queued_tokens"',
    )
    return Alert(
        "vllm-admission-rejecting",
        f"{P}admission_rejections_per_s > 0 or sum by ({r}) (rate({refused}[{w}])) > 0",
        f"{replica(spec)}: vLLM rejects {value('rate')} requests/s itself with 503 "
        "(--max-num-queued-reqs/-tokens), counted by vLLM or by the gateway passing them on",
        "queue in the llmtop gateway instead (priorities, timeouts, live limits): keep its "
        "max_concurrency at or below vLLM's --max-num-seqs, or raise vLLM's "
        "--max-num-queued-reqs/-tokens",
        open_replica(spec),
        "vLLM's admission_rejections_total rising (0.32+), or the gateway's count of the "
        "503s it passed on",
    )


ENGINE_ALERTS = (
    target_down,
    stats_disabled,
    stale_data,
    scheduler_stuck,
    kv_exhausted,
    degraded_200,
    batching_cliff,
    decode_bound,
    prefill_bound,
    vllm_admission,
)
"""Every engine finding PromQL expresses, in the order of `RULES`."""
