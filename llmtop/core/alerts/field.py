"""The field guide's engine findings as alerting rules, where one PromQL expression says what
the rule says (the others are in `rulesfile.NOT_EXPRESSED`, with why). Pure."""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.spec import AlertSpec, duration
from llmtop.core.alerts.templates import open_replica, replica, value
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


FIELD_ALERTS = (
    engine_unhealthy,
    engine_asleep,
    engine_restarted,
    requests_corrupted,
    kv_transfer_failing,
)
"""The field guide's findings PromQL expresses, in the order of `RULES`."""
