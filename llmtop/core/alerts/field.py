"""The field guide's engine findings as alerting rules, where one PromQL expression says what
the rule says (the others are in `rulesfile.NOT_EXPRESSED`, with why). Pure."""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, duration, number
from llmtop.core.alerts.templates import computed, figure, open_replica, replica, value
from llmtop.core.vllm.names import COUNTERS, ENGINE_HEALTHY, SLEEP_STATE


def _rate(spec: AlertSpec, *keys: str) -> str:
    """The per-second increase of vLLM's counters (by `COUNTERS` key) per replica, added."""
    r, w = spec.r, duration(spec.window_s)
    return " + ".join(
        f"(sum by ({r}) (rate({spec.vllm(*COUNTERS[k])}[{w}])) or on ({r}) {_zero(spec)})"
        for k in keys
    )


def _zero(spec: AlertSpec) -> str:
    """0 for every replica that exports vLLM's running gauge (a counter not exported adds 0)."""
    return f"0 * max by ({spec.r}) ({spec.vllm('vllm:num_requests_running')})"


def engine_unhealthy(spec: AlertSpec) -> Alert:
    return Alert(
        "engine-unhealthy",
        f"min by ({spec.r}) ({spec.vllm(ENGINE_HEALTHY)}) == 0",
        f"{replica(spec)}: vLLM reports its engine unhealthy (engine_healthy 0)",
        "check the engine core's log; restart vLLM (its /metrics still answers)",
        open_replica(spec),
        "engine_healthy == 0 (where a vLLM build exports it; 0.32's does not)",
    )


def engine_asleep(spec: AlertSpec) -> Alert:
    r = spec.r
    awake = spec.vllm(SLEEP_STATE, extra='sleep_state="awake"')
    waiting = spec.vllm("vllm:num_requests_waiting")
    return Alert(
        "engine-asleep",
        f"max by ({r}) ({awake}) == 0 and on ({r}) sum by ({r}) ({waiting}) > 0",
        f"{replica(spec)}: engine asleep with requests waiting: none is served",
        "wake it (POST /wake_up) or take it out of the router",
        open_replica(spec),
        "engine_sleep_state{sleep_state=awake} == 0 with requests waiting: the critical case "
        "(llmtop's info heads-up for an idle sleeping engine is not alerted)",
        severity="critical",
    )


def requests_corrupted(spec: AlertSpec) -> Alert:
    return Alert(
        "requests-corrupted",
        f"{_rate(spec, 'corrupted_requests')} > 0",
        f"{replica(spec)}: {value('rate')} requests/s with NaN logits: their answers are garbage",
        "check the model's dtype and quantisation and the GPU (XID, ECC errors); restart vLLM",
        open_replica(spec),
        "rate(vllm:corrupted_requests_total) > 0 (exported with VLLM_COMPUTE_NANS_IN_LOGITS=1)",
    )


def kv_transfer_failing(spec: AlertSpec) -> Alert:
    failures = _rate(
        spec,
        "nixl_failed_transfers",
        "nixl_failed_notifications",
        "nixl_expired_requests",
        "kv_offload_failures",
    )
    return Alert(
        "kv-transfer-failing",
        f"({failures}) > 0",
        f"{replica(spec)}: KV transfers failing at {value('rate')}/s",
        "check the KV connector between the prefill and decode instances (NIXL side channel, "
        "network, the peer's health) and the offload store's free space",
        open_replica(spec),
        "NIXL failed transfers + failed notifications + expired requests + offload allocation "
        "failures per second > 0; labelled warning (llmtop's own severity follows the SLO)",
    )


def engine_restarted(spec: AlertSpec) -> Alert:
    r = spec.r
    w = duration(spec.at_least_interval(spec.health.restart_note_s))
    tokens = spec.vllm(*COUNTERS["generation_tokens"])
    return Alert(
        "engine-restarted",
        f"sum by ({r}) (resets({tokens}[{w}])) > 0",
        f"{replica(spec)}: engine restarted in the last {w} (its counters went back)",
        "check why in vLLM's log (OOM, a crash, a deploy); its prefix cache starts cold",
        open_replica(spec),
        f"resets() of vllm:generation_tokens_total over {w} (restart_note_s)",
    )


SLO_SEVERITY = "{{ if and (ge $value 0.0) (le $value 1.0) }}info{{ else }}warning{{ end }}"
"""The field findings' severity by the SLO (`slo_policy`): the value is the worst latency over
its SLO, -1 when unknown; inside it info, missed or unknown warning."""


def _by_slo(spec: AlertSpec, held: str) -> str:
    """`held`'s replicas with the worst latency over its SLO as the value (-1 when unknown)."""
    r = spec.r
    return f"(max by ({r}) ({P}slo_ratio) and on ({r}) {held}) or on ({r}) ({held} * 0 - 1)"


def _level(spec: AlertSpec, figure_name: str, matcher: str = "") -> str:
    """The highest of a recorded figure over the look-back (prefix_lookback_s), leaving out the
    last window as llmtop does (`matcher`: one replica's, for a template), and nothing while
    the look-back holds a restart (`resets` of the generated tokens: that level was another
    process's)."""
    r, h = spec.r, spec.health
    off = spec.window_s
    span = duration(spec.at_least_interval(h.prefix_lookback_s - off))
    tokens = spec.vllm(*COUNTERS["generation_tokens"])
    lookback = duration(spec.at_least_interval(h.prefix_lookback_s))
    return (
        f"(max_over_time({P}{figure_name}{matcher}[{span}] offset {duration(off)}) unless on "
        f"({r}) sum by ({r}) (resets({tokens}[{lookback}])) > 0)"
    )


def prefix_cache_collapse(spec: AlertSpec) -> Alert:
    r, h = spec.r, spec.health
    level = _level(spec, "prefix_cache_hit_frac")
    held = (
        f"({P}prefix_cache_hit_frac < on ({r}) "
        f"({number(h.prefix_drop_to_share)} * ({level} >= {number(h.prefix_drop_from_frac)})))"
    )
    one = _level(spec, "prefix_cache_hit_frac", f"{{{r}=%[1]q}}")
    now = f"{P}prefix_cache_hit_frac{{{r}=%[1]q}}"
    return Alert(
        "prefix-cache-collapse",
        _by_slo(spec, held),
        f"{replica(spec)}: prefix cache hit rate {computed(spec, one, 'frac')} -> "
        f"{figure(spec, P + 'prefix_cache_hit_frac', 'frac')} within "
        f"{duration(h.prefix_lookback_s)}: prompt tokens computed per request "
        f"{computed(spec, f'(1 - {now}) / (1 - {one})', 'number')}x "
        f"({figure(spec, P + 'prompt_tok_per_s', 'rate')} prompt tokens/s)",
        "did the system prompt or the routing change? (a deploy that changed the shared "
        "prefix, a router no longer keeping a session on one replica)",
        open_replica(spec),
        "hit rate (prefix_cache_hits / prefix_cache_queries over the window, while queried) "
        f"under prefix_drop_to_share ({h.prefix_drop_to_share:g}) of its highest over "
        f"prefix_lookback_s ({h.prefix_lookback_s:g} s) before the window, that highest >= "
        f"prefix_drop_from_frac ({h.prefix_drop_from_frac:g}), no restart in the look-back. "
        "Severity by the SLO: warning over it or unknown, info inside it (llmtop's warning "
        "for a rising p95 is not expressed)",
        severity=SLO_SEVERITY,
    )


def spec_decode_low(spec: AlertSpec) -> Alert:
    r, h = spec.r, spec.health
    acc = f"{P}spec_acceptance_frac"
    level = _level(spec, "spec_acceptance_frac")
    held = (
        f"({acc} < {number(h.spec_acceptance_low_frac)} or {acc} < on ({r}) "
        f"({number(h.spec_drop_share)} * {level}))"
    )
    one = _level(spec, "spec_acceptance_frac", f"{{{r}=%[1]q}}")
    return Alert(
        "spec-decode-low",
        _by_slo(spec, held),
        f"{replica(spec)}: speculative decoding accepts {figure(spec, acc, 'frac')} of draft "
        f"tokens (its highest within {duration(h.prefix_lookback_s)}: "
        f"{computed(spec, one, 'frac')})",
        "sampled requests (temperature > 0) or a draft that no longer fits the traffic: "
        "lower num_speculative_tokens or restart vLLM without --speculative-config for it",
        open_replica(spec),
        "accepted / draft tokens over the last few seconds, while drafts are made, under "
        f"spec_acceptance_low_frac ({h.spec_acceptance_low_frac:g}) or under spec_drop_share "
        f"({h.spec_drop_share:g}) of its highest over prefix_lookback_s before the window (no "
        "restart in it). Severity by the SLO, as prefix-cache-collapse's",
        severity=SLO_SEVERITY,
    )


FIELD_ALERTS = (
    engine_unhealthy,
    engine_asleep,
    engine_restarted,
    requests_corrupted,
    prefix_cache_collapse,
    spec_decode_low,
    kv_transfer_failing,
)
"""The field guide's findings PromQL expresses, in the order of `RULES`."""
