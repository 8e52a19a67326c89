"""What vLLM says of itself: its engine unhealthy (engine-unhealthy), asleep
(engine-asleep), restarted (engine-restarted), requests with NaN logits (requests-corrupted).
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import counter_rate
from llmtop.core.alerts.spec import AlertSpec, duration
from llmtop.core.alerts.templates import open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict, up_engines, where
from llmtop.core.vllm.names import COUNTERS, ENGINE_HEALTHY, SLEEP_STATE


def engine_unhealthy(ctx: Context) -> Verdict | None:
    """The engine says it is unhealthy (`engine_healthy` 0, where a build exports it)."""
    for e in up_engines(ctx):
        if e.healthy is False:
            return Verdict(f"{where(ctx, e)}vLLM reports its engine unhealthy (engine_healthy 0)")
    return None


def _engine_unhealthy_alert(spec: AlertSpec) -> Alert:
    return Alert(
        f"min by ({spec.r}) ({spec.vllm(ENGINE_HEALTHY)}) == 0",
        f"{replica(spec)}: vLLM reports its engine unhealthy (engine_healthy 0)",
        open_replica(spec),
        "engine_healthy == 0 (where a vLLM build exports it; 0.32's does not)",
    )


ENGINE_UNHEALTHY = Definition(
    Rule("engine-unhealthy", "critical", "target", engine_unhealthy, immediate=True),
    advice="check the engine core's log; restart vLLM (its /metrics still answers)",
    guide=Guide("`vllm:engine_healthy` 0 (where exported)", "restart vLLM"),
    alert=_engine_unhealthy_alert,
)


def engine_asleep(ctx: Context) -> Verdict | None:
    """vLLM's sleep mode is on: the engine serves nothing until woken."""
    for e in up_engines(ctx):
        if e.sleep_state is None or e.sleep_state == "awake":
            continue
        level = "level 2, weights discarded" if e.sleep_state == "discard_all" else "level 1"
        waiting = e.waiting or 0.0
        summary = f"{where(ctx, e)}engine asleep ({e.sleep_state}: sleep {level})"
        if waiting:
            return Verdict(
                f"{summary} with {fmt.count(waiting)} requests waiting: none is served",
                severity="critical",
            )
        return Verdict(
            f"heads-up: {summary}, no request waiting; the next one waits for a wake-up",
            "POST /wake_up before sending traffic, or keep it out of the router",
        )
    return None


def _engine_asleep_alert(spec: AlertSpec) -> Alert:
    r = spec.r
    awake = spec.vllm(SLEEP_STATE, extra='sleep_state="awake"')
    waiting = spec.vllm("vllm:num_requests_waiting")
    return Alert(
        f"max by ({r}) ({awake}) == 0 and on ({r}) sum by ({r}) ({waiting}) > 0",
        f"{replica(spec)}: engine asleep with requests waiting: none is served",
        open_replica(spec),
        "engine_sleep_state{sleep_state=awake} == 0 with requests waiting: the critical case "
        "(llmtop's info heads-up for an idle sleeping engine is not alerted)",
        severity="critical",
    )


ENGINE_ASLEEP = Definition(
    Rule("engine-asleep", "info", "target", engine_asleep),
    advice="wake it (POST /wake_up) or take it out of the router",
    guide=Guide(
        "vLLM's sleep mode is on (critical with requests waiting)",
        "`POST /wake_up`, or keep it out of the router",
    ),
    alert=_engine_asleep_alert,
)


def engine_restarted(ctx: Context) -> Verdict | None:
    """An engine's counters went back: it restarted. Its rates carry across (a reset counts
    from zero); the findings that compare with an earlier level wait for a new one."""
    s = ctx.settings
    for e in up_engines(ctx):
        if e.restarted_at is None:
            continue
        ago = ctx.time - e.restarted_at
        if ago > s.restart_note_s:
            continue
        wait = max(0.0, s.window_s - ago)
        waiting = (
            f"; findings over a window wait {wait:.0f} s more for one of the new process"
            if wait
            else ""
        )
        return Verdict(
            f"heads-up: {where(ctx, e)}engine restarted {ago:.0f} s ago (its counters went "
            f"back){waiting}"
        )
    return None


def _engine_restarted_alert(spec: AlertSpec) -> Alert:
    r = spec.r
    w = duration(spec.at_least_interval(spec.health.restart_note_s))
    tokens = spec.vllm(*COUNTERS["generation_tokens"])
    return Alert(
        f"sum by ({r}) (resets({tokens}[{w}])) > 0",
        f"{replica(spec)}: engine restarted in the last {w} (its counters went back)",
        open_replica(spec),
        f"resets() of vllm:generation_tokens_total over {w} (restart_note_s)",
    )


ENGINE_RESTARTED = Definition(
    Rule("engine-restarted", "info", "target", engine_restarted, immediate=True),
    advice="check why in vLLM's log (OOM, a crash, a deploy); its prefix cache starts cold",
    guide=Guide(
        "one engine's counters went back (info, 60 s; window findings wait)",
        "check its log; the prefix cache starts cold",
    ),
    alert=_engine_restarted_alert,
    reads=("restart_note_s",),
)


def requests_corrupted(ctx: Context) -> Verdict | None:
    """Requests with NaNs in their logits: answers that are garbage, served with 200."""
    for e in up_engines(ctx):
        if e.corrupted_per_s:
            return Verdict(
                f"{where(ctx, e)}{fmt.per_s(e.corrupted_per_s)} requests with NaN logits "
                "(vllm:corrupted_requests): their answers are garbage",
            )
    return None


def _requests_corrupted_alert(spec: AlertSpec) -> Alert:
    return Alert(
        f"{counter_rate(spec, 'corrupted_requests')} > 0",
        f"{replica(spec)}: {value('rate')} requests/s with NaN logits: their answers are garbage",
        open_replica(spec),
        "rate(vllm:corrupted_requests_total) > 0 (exported with VLLM_COMPUTE_NANS_IN_LOGITS=1)",
    )


REQUESTS_CORRUPTED = Definition(
    Rule("requests-corrupted", "warning", "target", requests_corrupted),
    advice="check the model's dtype and quantisation and the GPU (XID, ECC errors); restart vLLM",
    guide=Guide("requests with NaN logits", "check dtype / quantisation and the GPU"),
    alert=_requests_corrupted_alert,
)

FINDINGS = (ENGINE_UNHEALTHY, ENGINE_ASLEEP, ENGINE_RESTARTED, REQUESTS_CORRUPTED)
