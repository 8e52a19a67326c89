"""The KV cache full while requests wait or are preempted (kv-exhausted), and the words
of a cap that fits it, which degraded-200 and the gateway's findings share.
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, number
from llmtop.core.alerts.templates import Shown, computed, figure, open_replica, replica
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.kvsize import KvSize
from llmtop.core.health.rulebase import (
    Context,
    Rule,
    Verdict,
    cap_action,
    kv_peak,
    kv_pressed,
    kv_size_now,
    up_engines,
    where,
)
from llmtop.core.health.slo_policy import heads_up, read_slo


def kv_arithmetic(spec: AlertSpec, which: str = "") -> str:
    """The sum behind the suggested cap, with the figures of the alert's replica (or of the
    one the template value `which` names): `KvSize.arithmetic`."""
    target = f"{spec.health.kv_target_frac * 100:g}%"

    def fig(name: str, how: Shown) -> str:
        return figure(spec, P + name, how, which=which)

    return (
        f"{fig('kv_budget_tokens', 'tokens')} KV tokens ({target} target of "
        f"{fig('kv_capacity_tokens', 'tokens')}) / {fig('kv_request_tokens', 'tokens')} tokens "
        f"per request in {fig('kv_block_size', 'count')}-token blocks = "
        f"{fig('kv_fits', 'count')} sequences fit"
    )


def running_cap(spec: AlertSpec) -> str:
    """A cap at the replica's running count (at least 1), printed when the alert is sent."""
    return computed(spec, f"clamp_min({P}running{{{spec.r}=%[1]q}}, 1)", "count", "N")


def decode_cap(spec: AlertSpec) -> str:
    """A cap at decode tok/s x the ITL SLO (at least 1): what keeps each step within it."""
    rate = f"{P}decode_tok_per_s{{{spec.r}=%[1]q}}"
    return computed(
        spec, f"clamp_min(floor({rate} * {number(spec.health.slo.itl_s)}), 1)", "count", "N"
    )


def templated_cap(n: str, why: str) -> str:
    """`cap_action`'s words for a cap of `n` (a template printing it)."""
    return (
        f"{why}: cap concurrency at ~{n}: press - or :cap {n} in llmtop (gateway "
        f"max_concurrency), or restart vLLM with --max-num-seqs {n}"
    )


def kv_pressed_expr(spec: AlertSpec) -> str:
    """`kv_pressed`: the window's KV peak at its high mark, with preemptions or waiting."""
    on = f"on ({spec.r})"
    return (
        f"({P}kv_usage_peak_frac >= {number(spec.health.kv_high_frac)} and {on} "
        f"({P}preemptions_per_s > 0 or {on} {P}waiting_for_kv > 0))"
    )


_WHY = "more sequences than the KV cache holds"


def kv_exhausted(ctx: Context) -> Verdict | None:
    """The cache is full and requests wait or are preempted: cap at what it holds (`kv_size`:
    the larger of the mean finished request and the KV each running sequence held, so a mix
    of short chats and long prompts is sized by what fills the cache, not by the chats).
    """
    for e in up_engines(ctx):
        waiting = e.waiting_capacity if e.waiting_capacity is not None else e.waiting
        if not e.preemptions_per_s and not waiting:
            continue  # not pressed (`kv_pressed`), whatever the peak: no look-back
        peak = kv_peak(ctx, e)
        if not kv_pressed(ctx, e, peak):
            continue
        return _kv_exhausted_words(ctx, e, peak, waiting, kv_size_now(ctx, e))
    return None


def _kv_exhausted_words(
    ctx: Context, e: EngineStats, peak: float | None, waiting: float | None, size: KvSize | None
) -> Verdict:
    running = e.running
    n = size.fits if size is not None else None
    arithmetic = f"; {size.arithmetic()}" if size is not None else ""
    if n is None and running:
        n = max(1, int(running))  # capacity unknown: what fits is what runs
        arithmetic = f"; the cache holds the {n} running now"
    summary = (
        f"{where(ctx, e)}KV cache {fmt.frac(peak)} full, "
        f"{fmt.per_s(e.preemptions_per_s, ' preemptions/s')}, {fmt.count(waiting)} waiting for "
        f"capacity, {fmt.count(running)} running{arithmetic}"
    )
    slo = read_slo(ctx, e)  # the severity policy: critical only when users miss the SLO
    return Verdict(
        heads_up(slo, summary),
        cap_action(n, _WHY, ctx),
        severity=slo.severity("critical"),
    )


def _kv_exhausted_alert(spec: AlertSpec) -> Alert:
    fits = figure(spec, P + "kv_fits", "count")
    r, pressed = spec.r, kv_pressed_expr(spec)
    # the value is the worst latency over its SLO (-1 when unknown): the severity follows it
    slo = f"max by ({r}) ({P}slo_ratio)"
    return Alert(
        f"({slo} and on ({r}) {pressed}) or on ({r}) ({pressed} * 0 - 1)",
        f"{replica(spec)}: KV cache {figure(spec, P + 'kv_usage_peak_frac', 'frac')} full, "
        f"{figure(spec, P + 'preemptions_per_s', 'rate')} preemptions/s, "
        f"{figure(spec, P + 'waiting_for_kv', 'count')} waiting for capacity, "
        f"{figure(spec, P + 'running', 'count')} running; {kv_arithmetic(spec)}",
        open_replica(spec),
        f"the window's KV peak >= kv_high_frac ({spec.health.kv_high_frac:g}) with "
        "preemptions or requests waiting for capacity; the cap is kv_size's. Severity by the "
        "SLO: critical over it, info inside it, warning when the latency is unknown (llmtop's "
        "warning for a rising p95 or a queue that will miss it is not expressed here)",
        action=templated_cap(fits, _WHY),
        severity="{{ if gt $value 1.0 }}critical{{ else if lt $value 0.0 }}warning"
        "{{ else }}info{{ end }}",
    )


KV_EXHAUSTED = Definition(
    Rule("kv-exhausted", "critical", "kv", kv_exhausted),
    guide=Guide(
        "KV usage >= 90 % with preemptions or requests waiting for memory; critical over the "
        "SLO, warning about to be, info inside it",
        "cap concurrency at ~N = 90 % of the KV tokens (`kv_target_frac`) / tokens per request: "
        "the larger of the mean prompt + output and what each running sequence held (usage x "
        "capacity / running, the most in the last minute)",
    ),
    alert=_kv_exhausted_alert,
    reads=("kv_high_frac", "kv_target_frac"),
    needs=("kv_usage",),
)

FINDINGS = (KV_EXHAUSTED,)
