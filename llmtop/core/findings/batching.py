"""What binds the batch: more load only adds queueing (batching-cliff), each step shares
the memory bandwidth (decode-bound), or prompts fill the steps (prefill-bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, duration, number
from llmtop.core.alerts.templates import figure, open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.findings.degraded import itl_tail_from_prefill
from llmtop.core.findings.kv_cache import decode_cap, running_cap, templated_cap
from llmtop.core.health.rulebase import Context, Rule, Verdict, cap_action, up_engines, where
from llmtop.core.health.slo_policy import heads_up, read_slo


def _past(
    ctx: Context, url: str, ago_s: float, known: Callable[[EngineStats], bool]
) -> tuple[float, EngineStats] | None:
    """The engine's stats from the snapshot closest to `ago_s` before now (at least half)
    among those where `known` holds: a first poll has no rates yet, and unknown is not a
    reason to look no further (a snapshot's first poll is exactly its window ago)."""
    best: tuple[float, EngineStats] | None = None
    best_gap = 0.0  # abs(best[0] - ago_s) once `best` is set, worked out once
    now, half = ctx.time, ago_s / 2
    for snap in reversed(ctx.history):
        dt = now - snap.time
        if dt < half:
            continue
        if best is not None and dt - ago_s > best_gap:
            break  # only further from `ago_s` from here on
        for e in snap.engines:
            if e.url == url and e.up and known(e):
                gap = abs(dt - ago_s)
                if best is None or gap < best_gap:
                    best, best_gap = (dt, e), gap
    return best


def _cliff_inputs(e: EngineStats) -> bool:
    """Whether a row knows what batching-cliff compares (waiting, decode rate)."""
    return e.waiting is not None and e.decode_tok_per_s is not None


_CLIFF_WHY = "the engine is at its batch limit; queue in the gateway"


def batching_cliff(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in up_engines(ctx):
        if e.waiting is None or e.decode_tok_per_s is None:
            continue  # before the look-back, which is the costly part
        past = _past(ctx, e.url, s.window_s, _cliff_inputs)
        if past is None:
            continue
        dt, then = past
        if then.waiting is None or not then.decode_tok_per_s:
            continue
        grew = e.waiting - then.waiting
        flat = (
            abs(e.decode_tok_per_s - then.decode_tok_per_s)
            <= s.cliff_flat_frac * then.decode_tok_per_s
        )
        if grew < s.cliff_waiting_growth or not flat:
            continue
        limit = ""
        if ctx.max_num_seqs is not None and e.running is not None and e.running >= ctx.max_num_seqs:
            limit = f" (vLLM --max-num-seqs {ctx.max_num_seqs} reached)"
        summary = (
            f"{where(ctx, e)}waiting {fmt.count(then.waiting)} -> {fmt.count(e.waiting)} in "
            f"{dt:.0f} s while decode stays at {fmt.tok_per_s(e.decode_tok_per_s)} with "
            f"{fmt.count(e.running)} running{limit}: more load only adds queueing"
        )
        n = max(1, int(e.running)) if e.running else None
        slo = read_slo(ctx, e)
        return Verdict(
            heads_up(slo, summary),
            cap_action(n, _CLIFF_WHY, ctx),
            severity=slo.severity("warning"),
        )
    return None


def _batching_cliff_alert(spec: AlertSpec) -> Alert:
    h, on = spec.health, f"on ({spec.r})"
    w = duration(spec.window_s)
    then = f"{P}decode_tok_per_s offset {w}"
    running = figure(spec, P + "running", "count")
    cap = running_cap(spec)
    return Alert(
        f"{P}waiting - {on} {P}waiting offset {w} >= {number(h.cliff_waiting_growth)}"
        f" and {on} abs({P}decode_tok_per_s - {on} {then})"
        f" <= {on} {number(h.cliff_flat_frac)} * {then}"
        f" and {on} {then} > 0",
        f"{replica(spec)}: waiting grew by {value('count')} in {w} while decode stays at "
        f"{figure(spec, P + 'decode_tok_per_s', 'rate')} tok/s with {running} running: more "
        "load only adds queueing",
        open_replica(spec),
        f"waiting up by cliff_waiting_growth ({h.cliff_waiting_growth:g}) over the window "
        f"while decode tok/s stays within cliff_flat_frac ({h.cliff_flat_frac:g})",
        action=templated_cap(cap, _CLIFF_WHY),
    )


BATCHING_CLIFF = Definition(
    Rule("batching-cliff", "warning", "queue", batching_cliff),
    guide=Guide(
        "waiting grows while decode throughput stays flat",
        "cap at the running count; let the gateway queue",
    ),
    alert=_batching_cliff_alert,
    reads=("cliff_waiting_growth", "cliff_flat_frac"),
    needs=("generation_tokens",),
)


def _best_at_half(history: Sequence[Snapshot], e: EngineStats) -> EngineStats | None:
    """The engine's row with the best per-sequence decode rate at half its running now or
    fewer, oldest first among equals."""
    best: EngineStats | None = None
    running = e.running
    if running is None:
        return None
    for snap in history:
        for p in snap.engines:
            if (
                p.url == e.url
                and p.running
                and p.decode_tok_per_s_per_seq is not None
                and p.running * 2 <= running
                and (
                    best is None
                    or p.decode_tok_per_s_per_seq > (best.decode_tok_per_s_per_seq or 0)
                )
            ):
                best = p
    return best


def decode_bound(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in up_engines(ctx):
        if not e.running or e.decode_tok_per_s_per_seq is None or e.decode_tok_per_s is None:
            continue
        # The tests that need no look-back first: most polls end here, before the history.
        itl_over = e.itl_p95_s is not None and e.itl_p95_s > s.slo.itl_s
        if not itl_over and e.decode_tok_per_s_per_seq * s.slo.itl_s >= 1.0:
            continue  # slower per sequence, as batching always is, but within the ITL SLO
        if itl_tail_from_prefill(e, s.slo.itl_s):
            continue  # the mean ITL fits: a tail from prefill chunks (degraded-200 says so)
        best = _best_at_half(ctx.history, e)
        if best is None or best.decode_tok_per_s_per_seq is None:
            continue
        if e.decode_tok_per_s_per_seq > s.decode_collapse_frac * best.decode_tok_per_s_per_seq:
            continue
        n = max(1, math.floor(e.decode_tok_per_s * s.slo.itl_s))
        summary = (
            f"{where(ctx, e)}each sequence decodes at {fmt.tok_per_s(e.decode_tok_per_s_per_seq)} "
            f"with {fmt.count(e.running)} running, down from "
            f"{fmt.tok_per_s(best.decode_tok_per_s_per_seq)} at {fmt.count(best.running)} "
            f"({fmt.tok_per_s(e.decode_tok_per_s)} aggregate): decode steps are memory-bound"
        )
        why = (
            f"to keep ITL under {fmt.seconds(s.slo.itl_s)} at "
            f"{fmt.tok_per_s(e.decode_tok_per_s)} aggregate"
        )
        return Verdict(summary, cap_action(n, why, ctx))
    return None


def _decode_bound_alert(spec: AlertSpec) -> Alert:
    h, r = spec.health, spec.r
    on = f"on ({r})"
    itl = number(h.slo.itl_s)
    cap = decode_cap(spec)
    return Alert(
        f"{P}decode_tok_per_s_per_seq and {on} ({P}running > 0)"
        f" and {on} ({P}running / {on} {P}decode_tok_per_s > {itl})"
        f" and {on} {P}decode_tok_per_s_per_seq <= {on} "
        f"{number(h.decode_collapse_frac)} * {P}decode_tok_per_s_per_seq_best_at_half",
        f"{replica(spec)}: each sequence decodes at {value('rate')} tok/s with "
        f"{figure(spec, P + 'running', 'count')} running, down from "
        f"{figure(spec, P + 'decode_tok_per_s_per_seq_best_at_half', 'rate')} tok/s at half "
        f"that or fewer ({figure(spec, P + 'decode_tok_per_s', 'rate')} tok/s aggregate): "
        "decode steps are memory-bound",
        open_replica(spec),
        "the per-sequence decode rate at or under decode_collapse_frac "
        f"({h.decode_collapse_frac:g}) of its best at half the running or fewer, with a mean "
        "ITL over its SLO. The best is looked up in bands of powers of two (the band at or "
        "below half the running now), so it may be lower than llmtop's and fire later",
        action=templated_cap(cap, f"to keep ITL under {h.slo.itl_s:g}s"),
    )


DECODE_BOUND = Definition(
    Rule("decode-bound", "warning", "decode", decode_bound),
    guide=Guide(
        "per-sequence decode rate collapsing as running grows, ITL over SLO",
        "cap at decode tok/s x ITL SLO",
    ),
    alert=_decode_bound_alert,
    reads=("slo.itl_s", "decode_collapse_frac"),
    needs=("itl", "generation_tokens"),
)


def prefill_bound(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in up_engines(ctx):
        if e.ttft_p95_s is None or e.ttft_p95_s <= s.slo.ttft_s:
            continue
        if e.prefill_time_mean_s is None or not e.ttft_mean_s:
            continue
        share = e.prefill_time_mean_s / e.ttft_mean_s
        if share < s.prefill_dominant_frac:
            continue
        summary = (
            f"{where(ctx, e)}prefill is {fmt.frac(min(share, 1.0))} of TTFT (mean "
            f"{fmt.seconds(e.prefill_time_mean_s)} of {fmt.seconds(e.ttft_mean_s)}; TTFT p95 "
            f"{fmt.seconds(e.ttft_p95_s)}) at {fmt.tok_per_s(e.prompt_tok_per_s)} prompt, mean "
            f"prompt {fmt.count(e.mean_prompt_tokens)} tokens"
        )
        return Verdict(summary)
    return None


def _prefill_bound_alert(spec: AlertSpec) -> Alert:
    h, on = spec.health, f"on ({spec.r})"
    return Alert(
        f"{P}prefill_time_mean_seconds / {on} ({P}ttft_mean_seconds > 0)"
        f" >= {number(h.prefill_dominant_frac)}"
        f" and {on} {P}ttft_p95_seconds > {number(h.slo.ttft_s)}",
        f"{replica(spec)}: prefill is {value('frac')} of TTFT (mean "
        f"{figure(spec, P + 'prefill_time_mean_seconds', 'seconds')} of "
        f"{figure(spec, P + 'ttft_mean_seconds', 'seconds')}; TTFT p95 "
        f"{figure(spec, P + 'ttft_p95_seconds', 'seconds')}) at "
        f"{figure(spec, P + 'prompt_tok_per_s', 'rate')} prompt tok/s, mean prompt "
        f"{figure(spec, P + 'prompt_tokens_mean', 'count')} tokens",
        open_replica(spec),
        "TTFT p95 over its SLO with prefill at least prefill_dominant_frac "
        f"({h.prefill_dominant_frac:g}) of the mean TTFT",
    )


PREFILL_BOUND = Definition(
    Rule("prefill-bound", "warning", "prefill", prefill_bound),
    advice="long prompts bind: cap in-flight prompt tokens at the gateway "
    "(max_inflight_prompt_tokens), enable prefix caching for shared prefixes, or lower "
    "--max-num-batched-tokens so chunked prefill interleaves with decode",
    guide=Guide("prefill time dominates TTFT", "cap in-flight prompt tokens"),
    alert=_prefill_bound_alert,
    reads=("slo.ttft_s", "prefill_dominant_frac"),
)

FINDINGS = (BATCHING_CLIFF, DECODE_BOUND, PREFILL_BOUND)
