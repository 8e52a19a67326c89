"""Health rules about the engines: down, blind, hung, KV exhaustion, degraded-200, batching
cliff, decode- and prefill-bound, vLLM's own admission. Each is a pure check over a `Context`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import Bottleneck, EngineStats, Severity, Snapshot
from llmtop.core.health.kvsize import KvSize
from llmtop.core.health.rulebase import (
    Context,
    Verdict,
    cap_action,
    kv_peak,
    kv_pressed,
    kv_size_now,
    up_engines,
    where,
)
from llmtop.core.health.slo_policy import heads_up, read_slo


def target_down(ctx: Context) -> Verdict | None:
    down = [e for e in ctx.engines if not e.up]
    if not down:
        return None
    what = "; ".join(e.error or f"{e.url}: no answer" for e in down)
    return Verdict(
        f"vLLM not answering: {what}",
        "check the vLLM process and its log (still loading the model? crashed? wrong port?)",
    )


def stats_disabled(ctx: Context) -> Verdict | None:
    off = [e.url for e in ctx.engines if e.up and e.stats_disabled]
    if not off:
        return None
    return Verdict(
        f"{', '.join(off)} answers but exports no vllm:* metrics: llmtop cannot see its load",
        "restart vLLM without --disable-log-stats (its /metrics then carries the vllm:* series)",
    )


def _itl_tail_from_prefill(e: EngineStats, itl_slo_s: float) -> bool:
    """Whether the running sequences alone fit the ITL SLO at the measured decode rate: N
    sequences sharing D decode tok/s see a mean ITL of N / D. Within the SLO while the p95 is
    not, the slow steps are those a prefill chunk (or a recompute) shares: "cap concurrency"
    would be the wrong advice."""
    if not e.running or not e.decode_tok_per_s:
        return False
    return e.running / e.decode_tok_per_s <= itl_slo_s


def degraded_200(ctx: Context) -> Verdict | None:
    s = ctx.settings
    # the gateway sees a stuck request at once; vLLM's TTFT histogram only once it is answered
    g = ctx.gateway
    stuck = g.oldest_unanswered_s if g is not None and g.up else None
    stuck_over = stuck is not None and stuck > s.slo.ttft_s
    for e in up_engines(ctx):
        p95_over = e.ttft_p95_s is not None and e.ttft_p95_s > s.slo.ttft_s
        ttft_over = p95_over or stuck_over
        itl_over = e.itl_p95_s is not None and e.itl_p95_s > s.slo.itl_s
        if not (ttft_over or itl_over):
            continue
        done = sum(e.finished_per_s.values())
        errors = e.finished_per_s.get("error", 0.0)
        if done > 0 and errors / done > s.error_rate_max:
            continue  # failing, not "200 OK but degraded"
        parts = []
        if p95_over:
            parts.append(f"TTFT p95 {fmt.seconds(e.ttft_p95_s)} (SLO {fmt.seconds(s.slo.ttft_s)})")
        if stuck_over:
            parts.append(
                f"a request at the engine has waited {fmt.seconds(stuck)} for its first token "
                f"(SLO {fmt.seconds(s.slo.ttft_s)})"
            )
        if itl_over:
            parts.append(f"ITL p95 {fmt.seconds(e.itl_p95_s)} (SLO {fmt.seconds(s.slo.itl_s)})")
        worst = max(
            (e.ttft_p95_s or 0.0) / s.slo.ttft_s,
            (stuck or 0.0) / s.slo.ttft_s,
            (e.itl_p95_s or 0.0) / s.slo.itl_s,
        )
        severity: Severity = "critical" if worst >= s.critical_slo_factor else "warning"
        load = f"{fmt.count(e.running)} running, {fmt.count(e.waiting)} waiting"
        summary = f"{where(ctx, e)}{', '.join(parts)} with ~0 errors; {load}"
        bottleneck: Bottleneck
        queue_share = (
            e.queue_time_mean_s / e.ttft_mean_s
            if e.queue_time_mean_s is not None and e.ttft_mean_s
            else None
        )
        if kv_pressed(ctx, e):
            bottleneck = "kv"
            size = kv_size_now(ctx, e)
            action = cap_action(size.fits if size else None, "KV cache is full", ctx)
        elif ttft_over and (
            (queue_share is not None and queue_share >= 0.5) or (e.waiting or 0) > 0
        ):
            bottleneck = "queue"
            n = max(1, int(e.running)) if e.running else None
            action = cap_action(n, "requests queue inside vLLM", ctx)
        elif itl_over and not ttft_over and _itl_tail_from_prefill(e, s.slo.itl_s):
            bottleneck = "prefill"
            action = (
                "decode steps wait behind prefill chunks (the mean ITL is within the SLO, the "
                "tail is not): cap in-flight prompt tokens at the gateway "
                "(max_inflight_prompt_tokens), or restart vLLM with a lower "
                "--max-num-batched-tokens (smaller prefill chunks: better ITL, slower TTFT)"
            )
        elif itl_over and not ttft_over:
            bottleneck = "decode"
            n = max(1, math.floor((e.decode_tok_per_s or 0.0) * s.slo.itl_s)) or None
            why = "too many sequences share each decode step"
            action = cap_action(n, why, ctx)
        else:
            bottleneck = "prefill"
            action = (
                "prompts are expensive: cap in-flight prompt tokens at the gateway "
                "(max_inflight_prompt_tokens), enable prefix caching, or add capacity"
            )
        return Verdict(summary, action, severity=severity, bottleneck=bottleneck)
    return None


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
        cap_action(n, "more sequences than the KV cache holds", ctx),
        severity=slo.severity("critical"),
    )


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
            cap_action(n, "the engine is at its batch limit; queue in the gateway", ctx),
            severity=slo.severity("warning"),
        )
    return None


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
        if _itl_tail_from_prefill(e, s.slo.itl_s):
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
        action = (
            "long prompts bind: cap in-flight prompt tokens at the gateway "
            "(max_inflight_prompt_tokens), enable prefix caching for shared prefixes, or lower "
            "--max-num-batched-tokens so chunked prefill interleaves with decode"
        )
        return Verdict(summary, action)
    return None


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
        return Verdict(
            summary,
            "check the vLLM log for a stuck step or a dead engine core; restart it if hung",
        )
    return None


VLLM_REFUSAL_FLAGS = {
    "max_num_queued_reqs": "--max-num-queued-reqs",
    "max_num_queued_tokens": "--max-num-queued-tokens",
    "engine_queue_full": "--max-num-queued-reqs",
    "engine_token_backlog": "--max-num-queued-tokens",
}
"""vLLM's refusal reasons (its metric's, or the gateway's names for its 503s) -> its flag."""


def vllm_admission(ctx: Context) -> Verdict | None:
    """vLLM refuses work itself (503): from its own counter (0.32+) or the gateway's count."""
    g = ctx.gateway
    seen_by_gateway = (
        {k: v for k, v in g.upstream_errors_per_s.items() if k in VLLM_REFUSAL_FLAGS and v}
        if g is not None and g.up
        else {}
    )
    for e in up_engines(ctx):
        rate = e.admission_rejections_per_s or sum(seen_by_gateway.values())
        if not rate:
            continue  # the common case: no refusals, and no reasons to list
        reasons = {k: v for k, v in e.admission_rejections_by_reason_per_s.items() if v}
        return _refusal(f"{where(ctx, e)}vLLM", rate, reasons or seen_by_gateway, seen_by_gateway)
    if seen_by_gateway and not up_engines(ctx):
        return _refusal("vLLM", sum(seen_by_gateway.values()), seen_by_gateway, seen_by_gateway)
    return None


def _refusal(
    who: str, rate: float, reasons: dict[str, float], seen_by_gateway: dict[str, float]
) -> Verdict:
    flags = sorted({VLLM_REFUSAL_FLAGS[r] for r in reasons if r in VLLM_REFUSAL_FLAGS})
    flag = "/".join(flags) or "--max-num-queued-reqs/-tokens"
    passed = (
        f"; the gateway passed {fmt.per_s(sum(seen_by_gateway.values()))} of them on as 503 "
        "(not its own 429s)"
        if seen_by_gateway
        else ""
    )
    return Verdict(
        f"{who} rejects {fmt.per_s(rate)} requests itself with 503 ({flag}){passed}",
        "queue in the llmtop gateway instead (priorities, timeouts, live limits): keep its "
        f"max_concurrency at or below vLLM's --max-num-seqs, or raise vLLM's {flag}",
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
        action = (
            "restart vLLM (a stuck scheduler stays stuck, and /health still answers 200, so a "
            "liveness probe will not restart it); a gateway in front holds new requests meanwhile"
        )
        return Verdict(summary, action)
    return None
