"""Whether llmtop sees the engine work: it answers (target-down), exports its figures
(stats-disabled), makes tokens while it runs requests (stale-data), and admits what waits
(scheduler-stuck). Each finding's check, alert and words.
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, duration, number
from llmtop.core.alerts.templates import figure, open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats
from llmtop.core.dialects.catalog import described
from llmtop.core.dialects.engines import BY_KIND, DIALECTS, VLLM
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict, up_engines, where


def target_down(ctx: Context) -> Verdict | None:
    down = [e for e in ctx.engines if not e.up]
    if not down:
        return None
    what = "; ".join(e.error or f"{e.url}: no answer" for e in down)
    return Verdict(f"{_titled(down)} not answering: {what}")


def _titled(engines: list[EngineStats]) -> str:
    """The engines' name in a finding's words: vLLM, llama.cpp, ..., or "the engine"."""
    titles = {described(e.engine)[0] if e.engine else "" for e in engines}
    return titles.pop() if len(titles) == 1 and "" not in titles else "the engine"


def _target_down_alert(spec: AlertSpec) -> Alert:
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
        expr,
        f"vLLM at {replica(spec)} not answering its /metrics (up == 0)",
        open_replica(spec),
        f"up == 0 for {which}; in a fleet this is also replica-down",
    )


TARGET_DOWN = Definition(
    Rule("target-down", "critical", "target", target_down, immediate=True),
    advice="check the vLLM process and its log (still loading the model? crashed? wrong port?)",
    guide=Guide("no answer; no `vllm:*` series; running but no tokens", "check the engine"),
    alert=_target_down_alert,
)


def stats_disabled(ctx: Context) -> Verdict | None:
    off = [e for e in ctx.engines if e.up and e.stats_disabled]
    if not off:
        return None
    urls = ", ".join(e.url for e in off)
    kinds = {e.engine for e in off}
    (kind,) = kinds if len(kinds) == 1 else (None,)
    d = BY_KIND.get(kind or "")
    if d is None:  # nothing llmtop reads, and no info endpoint named the engine
        known = ", ".join(f"{x.prefix}*" for x in DIALECTS)
        return Verdict(
            f"{urls} answers but exports no metrics llmtop reads ({known}): llmtop cannot see "
            "its load",
            "turn the engine's metrics on: " + "; ".join(x.metrics_switch for x in DIALECTS[:3]),
        )
    named = "" if d is VLLM else f" ({d.title})"  # vLLM's words as they always were
    notes = sorted({e.engine_note for e in off if e.engine_note})
    forced = any(n.startswith("forced") for n in notes)
    return Verdict(
        f"{urls}{named} answers but exports no {d.prefix}* metrics: llmtop cannot see its load"
        + (f" ({'; '.join(notes)})" if notes else ""),
        ("check --engine-kind (its families are another engine's), or " if forced else "")
        + d.metrics_switch,
    )


def _stats_disabled_alert(spec: AlertSpec) -> Alert | str:
    r = spec.r
    if not spec.vllm_matchers:
        return (
            "needs --vllm-selector: without one, every target Prometheus scrapes that has no "
            "vllm:* series would be called a blind vLLM"
        )
    return Alert(
        f"max by ({r}) ({spec.vllm('up')}) == 1 unless on ({r}) "
        f'count by ({r}) ({{__name__=~"vllm:.+",{spec.vllm_matchers}}})',
        f"{replica(spec)} answers but exports no vllm:* metrics: llmtop cannot see its load",
        open_replica(spec),
        "a target the vLLM selector names is up with no vllm:* series",
    )


STATS_DISABLED = Definition(
    Rule("stats-disabled", "warning", "target", stats_disabled, immediate=True),
    advice=VLLM.metrics_switch,
    guide="target-down",
    alert=_stats_disabled_alert,
)


def stale_data(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in up_engines(ctx):
        last = ctx.last_progress.get(e.url)
        if not e.running or last is None or ctx.time - last < s.stale_after_s:
            continue
        summary = (
            f"{where(ctx, e)}{fmt.count(e.running)} running but no token generated for "
            f"{ctx.time - last:.0f} s: the engine is hung or its metrics are stale"
        )
        return Verdict(summary)
    return None


def _stale_data_alert(spec: AlertSpec) -> Alert:
    after = duration(spec.at_least_interval(spec.health.stale_after_s))
    on = f"on ({spec.r})"
    return Alert(
        f"{P}running > 0 and {on} ({P}tokens_total - {P}tokens_total offset {after} == 0)",
        f"{replica(spec)}: {value('count')} running but no token generated for {after}: the "
        "engine is hung or its metrics are stale",
        open_replica(spec),
        f"running > 0 and its token counters unchanged since {after} ago (stale_after_s)",
    )


STALE_DATA = Definition(
    Rule("stale-data", "critical", "target", stale_data),
    advice="check the vLLM log for a stuck step or a dead engine core; restart it if hung",
    guide="target-down",
    alert=_stale_data_alert,
    reads=("stale_after_s",),
    needs=("live_tokens",),
)


def scheduler_stuck(ctx: Context) -> Verdict | None:
    """The engine answers /metrics, requests wait, nothing runs, the KV cache has room, and no
    token has been made for `scheduler_stuck_after_s`: its scheduler admits nothing (vLLM
    issue #53130: it stays so until restarted, while /health says 200). Nothing running tells
    it from a hung step or a long prefill (`stale-data` names those); requests deferred for
    a LoRA or a KV transfer are not counted as waiting on the scheduler."""
    s = ctx.settings
    for e in up_engines(ctx):
        waiting = (e.waiting or 0.0) - (e.waiting_deferred or 0.0)
        if waiting <= 0 or e.running is None or e.running > 0:
            continue
        kv = e.kv_cache_usage_frac
        last = ctx.last_progress.get(e.url)
        if kv is None or not kv < s.kv_high_frac or last is None:
            continue
        idle_s = ctx.time - last
        if idle_s < s.scheduler_stuck_after_s:
            continue
        summary = (
            f"{where(ctx, e)}{fmt.count(waiting)} waiting, 0 running, KV {fmt.frac(kv)} used, "
            f"and no token generated in the last {idle_s:.0f} s while its /metrics answers: the "
            "scheduler admits nothing"
        )
        return Verdict(summary)
    return None


def _scheduler_stuck_alert(spec: AlertSpec) -> Alert:
    h, on = spec.health, f"on ({spec.r})"
    after = duration(spec.at_least_interval(h.scheduler_stuck_after_s))
    return Alert(
        f"({P}waiting - {on} {P}waiting_deferred or {P}waiting) > 0"
        f" and {on} {P}running == 0"
        f" and {on} {P}kv_usage_frac < {number(h.kv_high_frac)}"
        f" and {on} ({P}tokens_total - {P}tokens_total offset {after} == 0)",
        f"{replica(spec)}: {value('count')} waiting, 0 running, KV "
        f"{figure(spec, P + 'kv_usage_frac', 'frac')} used, and no token generated in the "
        f"last {after} while its /metrics answers: the scheduler admits nothing",
        open_replica(spec),
        "requests waiting (not deferred), none running, KV below kv_high_frac, token counters "
        f"unchanged since {after} ago (scheduler_stuck_after_s)",
    )


SCHEDULER_STUCK = Definition(
    Rule("scheduler-stuck", "critical", "target", scheduler_stuck),
    advice="restart vLLM (a stuck scheduler stays stuck, and /health still answers 200, so a "
    "liveness probe will not restart it); a gateway in front holds new requests meanwhile",
    guide=Guide(
        "requests waiting, none running, KV free, no token for 10 s while /metrics answers",
        "restart vLLM (/health still says 200)",
    ),
    alert=_scheduler_stuck_alert,
    reads=("kv_high_frac", "scheduler_stuck_after_s"),
    needs=("live_tokens",),
)

FINDINGS = (TARGET_DOWN, STATS_DISABLED, STALE_DATA, SCHEDULER_STUCK)
