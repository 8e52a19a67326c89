"""The field guide's engine rules: how a vLLM degrades while it answers 200 (prefix cache, spec
decoding, LoRA slots, KV transfer, sleep, health, corrupted requests, a restart, decode stalls),
each a pure check over a `Context`, its severity from the SLO (`slo_policy`). A rule comparing
with an earlier level says nothing after a restart until the look-back is the new process's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from typing import TypeVar

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats
from llmtop.core.health.rulebase import Context, Verdict, up_engines, where
from llmtop.core.health.slo_policy import heads_up, read_slo

T = TypeVar("T")


def _earlier(
    ctx: Context, e: EngineStats, value: Callable[[EngineStats], T | None]
) -> Iterator[tuple[float, T]]:
    """(seconds ago, value) of the engine's rows older than a window and within the look-back,
    none from before its last restart (those describe another process)."""
    s = ctx.settings
    since = ctx.time - s.prefix_lookback_s
    if e.restarted_at is not None:
        since = max(since, e.restarted_at)
    for snap in ctx.history:
        if snap.time < since or ctx.time - snap.time < s.window_s:
            continue
        for row in snap.engines:
            if row.url == e.url and row.up:
                v = value(row)
                if v is not None:
                    yield ctx.time - snap.time, v


def prefix_cache_collapse(ctx: Context) -> Verdict | None:
    """The prefix cache's hit rate fell to a fraction of its level over the look-back: the same
    load now costs several times the prefill (a changed system prompt, a router that stopped
    keeping sessions on one replica)."""
    s = ctx.settings
    for e in up_engines(ctx):
        hit = e.prefix_cache_hit_frac
        if hit is None or not e.prefix_cache_queried_tok_per_s:
            continue
        before = max(_earlier(ctx, e, _queried_hit), key=lambda p: (p[1], -p[0]), default=None)
        if before is None:
            continue
        ago, level = before
        if level < s.prefix_drop_from_frac or hit >= s.prefix_drop_to_share * level:
            continue
        cost = (1.0 - hit) / (1.0 - level) if level < 1.0 else None
        more = f": prompt tokens computed per request {cost:.1f}x" if cost else ""
        slo = read_slo(ctx, e)
        summary = (
            f"{where(ctx, e)}prefix cache hit rate {fmt.frac(level)} -> {fmt.frac(hit)} in "
            f"{ago:.0f} s{more} ({fmt.tok_per_s(e.prompt_computed_tok_per_s)} prefilled)"
        )
        return Verdict(
            heads_up(slo, summary),
            "did the system prompt or the routing change? (a deploy that changed the shared "
            "prefix, a router no longer keeping a session on one replica)",
            severity=slo.severity("warning"),
        )
    return None


def _queried_hit(e: EngineStats) -> float | None:
    return e.prefix_cache_hit_frac if e.prefix_cache_queried_tok_per_s else None


def spec_decode_low(ctx: Context) -> Verdict | None:
    """Speculative decoding accepts too few draft tokens to pay for them: low in itself, or
    fallen to a fraction of its level over the look-back."""
    s = ctx.settings
    for e in up_engines(ctx):
        acc = e.spec_acceptance_frac
        if acc is None or not e.spec_drafts_per_s:
            continue
        before = max(_earlier(ctx, e, _spec_acceptance), key=lambda p: p[1], default=None)
        fell = before is not None and acc < s.spec_drop_share * before[1]
        if acc >= s.spec_acceptance_low_frac and not fell:
            continue
        was = f" (was {fmt.frac(before[1])} {before[0]:.0f} s ago)" if before and fell else ""
        k = len(e.spec_acceptance_by_pos)
        pos = ", ".join(fmt.frac(p) for p in e.spec_acceptance_by_pos[:4])
        per_pos = f"; by position {pos}" if pos else ""
        proposed = f" for {k} proposed" if k else ""
        slo = read_slo(ctx, e)
        summary = (
            f"{where(ctx, e)}speculative decoding accepts {fmt.frac(acc)} of draft tokens{was}: "
            f"{e.spec_mean_accepted_len or 0.0:.2f} tokens per step{proposed}{per_pos}"
        )
        return Verdict(
            heads_up(slo, summary),
            "sampled requests (temperature > 0) or a draft that no longer fits the traffic: "
            "lower num_speculative_tokens or restart vLLM without --speculative-config for it",
            severity=slo.severity("warning"),
        )
    return None


def _spec_acceptance(e: EngineStats) -> float | None:
    return e.spec_acceptance_frac if e.spec_drafts_per_s else None


def lora_waiting(ctx: Context) -> Verdict | None:
    """Requests wait for a LoRA adapter slot: vLLM defers them (waiting reason `deferred`)
    while the slots hold other adapters. vLLM 0.32 lists every adapter with a live request
    under both labels of lora_requests_info (LoRARequestStates fills both dicts with the same
    keys), so a name in `waiting_lora_adapters` waits only if it is not also running; without
    the deferred count (before 0.20) such a name and every slot held are the sign."""
    for e in up_engines(ctx):
        lora = e.lora
        if lora is None:
            continue
        queued = tuple(a for a in lora.waiting if a not in lora.running)
        deferred = e.waiting_deferred
        full = lora.max_loras is None or len(lora.running) >= lora.max_loras
        if not (deferred or (deferred is None and queued and full)):
            continue
        slots = (
            f"{len(lora.running)} of {lora.max_loras} slots held"
            if lora.max_loras is not None
            else "slots unknown (max_lora unread)"
        )
        held = f" by {', '.join(lora.running)}" if lora.running else ""
        who = (
            f"LoRA adapters {', '.join(queued)} wait for a slot"
            if queued
            else "requests wait for a LoRA slot (vLLM does not say for which adapter)"
        )
        slo = read_slo(ctx, e)
        summary = (
            f"{where(ctx, e)}{who}: {slots}{held} (--max-loras {lora.max_loras}); "
            f"{fmt.count(deferred)} requests deferred"
        )
        return Verdict(
            heads_up(slo, summary),
            "raise --max-loras (each slot holds an adapter in GPU memory), or route each "
            "adapter's traffic to replicas that keep it loaded",
            severity=slo.severity("warning"),
        )
    return None


def kv_transfer_failing(ctx: Context) -> Verdict | None:
    """The KV connector (disaggregated prefill/decode, offload) fails transfers: requests
    recompute their prefill locally or fail."""
    for e in up_engines(ctx):
        failures = e.kv_transfer_failures_per_s
        if not failures:
            continue
        errors = e.finished_per_s.get("error", 0.0)
        slo = read_slo(ctx, e)
        severity = slo.severity("critical")
        if errors and severity == "info":
            severity = "warning"  # requests fail: users get errors, whatever the latency
        moved = fmt.per_s(e.kv_transfer_bytes_per_s, " B/s")
        mean = (
            f", mean transfer {fmt.seconds(e.kv_transfer_time_mean_s)}"
            if e.kv_transfer_time_mean_s is not None
            else ""
        )
        summary = (
            f"{where(ctx, e)}KV transfers failing at {fmt.per_s(failures)} ({moved} moved"
            f"{mean}), {fmt.per_s(errors)} requests ending in error"
        )
        return Verdict(
            heads_up(slo, summary) if not errors else f"{summary}; {slo.words}",
            "check the KV connector between the prefill and decode instances (NIXL side "
            "channel, network, the peer's health) and the offload store's free space",
            severity=severity,
        )
    return None


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
                "wake it (POST /wake_up) or take it out of the router",
                severity="critical",
            )
        return Verdict(
            f"heads-up: {summary}, no request waiting; the next one waits for a wake-up",
            "POST /wake_up before sending traffic, or keep it out of the router",
        )
    return None


def engine_unhealthy(ctx: Context) -> Verdict | None:
    """The engine says it is unhealthy (`engine_healthy` 0, where a build exports it)."""
    for e in up_engines(ctx):
        if e.healthy is False:
            return Verdict(
                f"{where(ctx, e)}vLLM reports its engine unhealthy (engine_healthy 0)",
                "check the engine core's log; restart vLLM (its /metrics still answers)",
            )
    return None


def requests_corrupted(ctx: Context) -> Verdict | None:
    """Requests with NaNs in their logits: answers that are garbage, served with 200."""
    for e in up_engines(ctx):
        if e.corrupted_per_s:
            return Verdict(
                f"{where(ctx, e)}{fmt.per_s(e.corrupted_per_s)} requests with NaN logits "
                "(vllm:corrupted_requests): their answers are garbage",
                "check the model's dtype and quantisation and the GPU (XID, ECC errors); "
                "restart vLLM",
            )
    return None


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
            f"back){waiting}",
            "check why in vLLM's log (OOM, a crash, a deploy); its prefix cache starts cold",
        )
    return None


def decode_stall(ctx: Context) -> Verdict | None:
    """Decode tok/s over the last poll fell under a quarter of its running median while a
    prefill runs and as many sequences run: long prompts freeze the decoders."""
    s = ctx.settings
    for e in up_engines(ctx):
        now = e.decode_tok_per_s_now
        if now is None or not e.running or not e.prompt_tok_per_s:
            continue
        rows = [(v, r) for _, (v, r) in _earlier(ctx, e, _decode_and_running_key)]
        if len(rows) < 5:
            continue  # no running median yet (a restart, a start)
        median = statistics.median(v for v, _ in rows)
        running = statistics.median(r for _, r in rows)
        if not median or now >= s.decode_stall_frac * median or e.running < running:
            continue
        slo = read_slo(ctx, e)
        summary = (
            f"{where(ctx, e)}decode {fmt.tok_per_s(now)} now, under a quarter of its running "
            f"median {fmt.tok_per_s(median)}, while prefill runs at "
            f"{fmt.tok_per_s(e.prompt_tok_per_s)} with {fmt.count(e.running)} running: long "
            "prompts stall the decoders"
        )
        return Verdict(
            heads_up(slo, summary),
            "cap in-flight prompt tokens at the gateway (max_inflight_prompt_tokens), or lower "
            "--max-num-batched-tokens so prefill chunks interleave with decode",
            severity=slo.severity("warning"),
        )
    return None


def _decode_and_running_key(e: EngineStats) -> tuple[float, float] | None:
    if e.decode_tok_per_s_now is None or not e.running:
        return None
    return e.decode_tok_per_s_now, e.running
