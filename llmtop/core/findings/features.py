"""How vLLM's features degrade while it answers 200: the prefix cache's hits collapse
(prefix-cache-collapse), prefill chunks stall decode (decode-stall), speculative decoding
accepts too little (spec-decode-low), requests wait for a LoRA slot (lora-waiting), KV
transfers fail (kv-transfer-failing). Severities by the SLO (`slo_policy`); a check comparing
with an earlier level says nothing after a restart until the look-back is the new process's.
"""

from __future__ import annotations

import bisect
import operator
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P, counter_rate
from llmtop.core.alerts.spec import AlertSpec, duration, number
from llmtop.core.alerts.templates import computed, figure, open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.findings.history import RisingHistory
from llmtop.core.health.rulebase import Context, Rule, Verdict, up_engines, where
from llmtop.core.health.slo_policy import heads_up, read_slo
from llmtop.core.vllm.names import COUNTERS

T = TypeVar("T")


def _earlier(
    ctx: Context, e: EngineStats, value: Callable[[EngineStats], T | None]
) -> Iterator[tuple[float, T]]:
    """(seconds ago, value) of the engine's rows older than a window and within the look-back,
    none from before its last restart (those describe another process), oldest first."""
    s = ctx.settings
    since = ctx.time - s.prefix_lookback_s
    if e.restarted_at is not None:
        since = max(since, e.restarted_at)
    for snap in _lookback(ctx, since):
        if snap.time < since or ctx.time - snap.time < s.window_s:
            continue
        for row in snap.engines:
            if row.url == e.url and row.up:
                v = value(row)
                if v is not None:
                    yield ctx.time - snap.time, v


def _lookback(ctx: Context, since: float) -> Sequence[Snapshot]:
    """The history's snapshots that may lie between `since` and a window ago: the slice found
    by bisection when the pipeline vouches that their times rise (it keeps ~10 minutes, the
    look-back is a minute: testing them all was a sixth of a poll's fold, py-spy), else all.
    The caller's tests still decide, so what is yielded is what a scan of all would yield."""
    history = ctx.history
    if not isinstance(history, RisingHistory):
        return history
    now, window = ctx.time, ctx.settings.window_s
    lo = bisect.bisect_left(history, since, key=_time)
    hi = bisect.bisect_left(history, True, lo, key=lambda snap: now - snap.time < window)
    return history[lo:hi]


_time = operator.attrgetter("time")


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
            severity=slo.severity("warning"),
        )
    return None


def _queried_hit(e: EngineStats) -> float | None:
    return e.prefix_cache_hit_frac if e.prefix_cache_queried_tok_per_s else None


def _prefix_cache_collapse_alert(spec: AlertSpec) -> Alert:
    r, h = spec.r, spec.health
    level = _level(spec, "prefix_cache_hit_frac")
    held = (
        f"({P}prefix_cache_hit_frac < on ({r}) "
        f"({number(h.prefix_drop_to_share)} * ({level} >= {number(h.prefix_drop_from_frac)})))"
    )
    one = _level(spec, "prefix_cache_hit_frac", f"{{{r}=%[1]q}}")
    now = f"{P}prefix_cache_hit_frac{{{r}=%[1]q}}"
    return Alert(
        _by_slo(spec, held),
        f"{replica(spec)}: prefix cache hit rate {computed(spec, one, 'frac')} -> "
        f"{figure(spec, P + 'prefix_cache_hit_frac', 'frac')} within "
        f"{duration(h.prefix_lookback_s)}: prompt tokens computed per request "
        f"{computed(spec, f'(1 - {now}) / (1 - {one})', 'number')}x "
        f"({figure(spec, P + 'prompt_tok_per_s', 'rate')} prompt tokens/s)",
        open_replica(spec),
        "hit rate (prefix_cache_hits / prefix_cache_queries over the window, while queried) "
        f"under prefix_drop_to_share ({h.prefix_drop_to_share:g}) of its highest over "
        f"prefix_lookback_s ({h.prefix_lookback_s:g} s) before the window, that highest >= "
        f"prefix_drop_from_frac ({h.prefix_drop_from_frac:g}), no restart in the look-back. "
        "Severity by the SLO: warning over it or unknown, info inside it (llmtop's warning "
        "for a rising p95 is not expressed)",
        severity=SLO_SEVERITY,
    )


PREFIX_CACHE_COLLAPSE = Definition(
    Rule("prefix-cache-collapse", "warning", "prefill", prefix_cache_collapse),
    advice="did the system prompt or the routing change? (a deploy that changed the shared "
    "prefix, a router no longer keeping a session on one replica)",
    guide=Guide(
        "prefix-cache hit rate under 0.35x its level over the last minute (88 % -> 3 %)",
        "did the system prompt or the routing change?",
    ),
    alert=_prefix_cache_collapse_alert,
    reads=("prefix_drop_from_frac", "prefix_drop_to_share", "prefix_lookback_s"),
    compares_levels=True,
    needs=("prefix_cache",),
)


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
            severity=slo.severity("warning"),
        )
    return None


def _decode_and_running_key(e: EngineStats) -> tuple[float, float] | None:
    if e.decode_tok_per_s_now is None or not e.running:
        return None
    return e.decode_tok_per_s_now, e.running


DECODE_STALL = Definition(
    Rule("decode-stall", "warning", "prefill", decode_stall),
    advice="cap in-flight prompt tokens at the gateway (max_inflight_prompt_tokens), or lower "
    "--max-num-batched-tokens so prefill chunks interleave with decode",
    guide=Guide(
        "decode tok/s under a quarter of its running median while a prefill runs",
        "cap in-flight prompt tokens, or a lower `--max-num-batched-tokens`",
    ),
    alert="a poll-to-poll decode rate against its running median over a minute: at "
    "Prometheus' scrape interval the stall (seconds long) is averaged away",
    compares_levels=True,
    needs=("itl",),
)


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
            severity=slo.severity("warning"),
        )
    return None


def _spec_acceptance(e: EngineStats) -> float | None:
    return e.spec_acceptance_frac if e.spec_drafts_per_s else None


def _spec_decode_low_alert(spec: AlertSpec) -> Alert:
    r, h = spec.r, spec.health
    acc = f"{P}spec_acceptance_frac"
    level = _level(spec, "spec_acceptance_frac")
    held = (
        f"({acc} < {number(h.spec_acceptance_low_frac)} or {acc} < on ({r}) "
        f"({number(h.spec_drop_share)} * {level}))"
    )
    one = _level(spec, "spec_acceptance_frac", f"{{{r}=%[1]q}}")
    return Alert(
        _by_slo(spec, held),
        f"{replica(spec)}: speculative decoding accepts {figure(spec, acc, 'frac')} of draft "
        f"tokens (its highest within {duration(h.prefix_lookback_s)}: "
        f"{computed(spec, one, 'frac')})",
        open_replica(spec),
        "accepted / draft tokens over the last few seconds, while drafts are made, under "
        f"spec_acceptance_low_frac ({h.spec_acceptance_low_frac:g}) or under spec_drop_share "
        f"({h.spec_drop_share:g}) of its highest over prefix_lookback_s before the window (no "
        "restart in it). Severity by the SLO, as prefix-cache-collapse's",
        severity=SLO_SEVERITY,
    )


SPEC_DECODE_LOW = Definition(
    Rule("spec-decode-low", "warning", "decode", spec_decode_low),
    advice="sampled requests (temperature > 0) or a draft that no longer fits the traffic: "
    "lower num_speculative_tokens or restart vLLM without --speculative-config for it",
    guide=Guide(
        "spec decode accepts under 25 % of draft tokens, or under half its earlier level",
        "lower `num_speculative_tokens`, or serve it without `--speculative-config`",
    ),
    alert=_spec_decode_low_alert,
    reads=("spec_acceptance_low_frac", "spec_drop_share", "prefix_lookback_s"),
    compares_levels=True,
    needs=("spec_decode",),
)


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
            severity=slo.severity("warning"),
        )
    return None


LORA_WAITING = Definition(
    Rule("lora-waiting", "warning", "queue", lora_waiting),
    advice="raise --max-loras (each slot holds an adapter in GPU memory), or route each "
    "adapter's traffic to replicas that keep it loaded",
    guide=Guide(
        "requests wait for a LoRA adapter slot, every `--max-loras` slot held",
        "raise `--max-loras`, or route adapters to replicas",
    ),
    alert="vllm:lora_requests_info's state is in its labels, one series per state change, the "
    "newest by value: PromQL cannot pick the newest series' labels and count them",
)


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
            severity=severity,
        )
    return None


def _kv_transfer_failing_alert(spec: AlertSpec) -> Alert:
    failures = counter_rate(
        spec,
        "nixl_failed_transfers",
        "nixl_failed_notifications",
        "nixl_expired_requests",
        "kv_offload_failures",
    )
    return Alert(
        f"({failures}) > 0",
        f"{replica(spec)}: KV transfers failing at {value('rate')}/s",
        open_replica(spec),
        "NIXL failed transfers + failed notifications + expired requests + offload allocation "
        "failures per second > 0; labelled warning (llmtop's own severity follows the SLO)",
    )


KV_TRANSFER_FAILING = Definition(
    Rule("kv-transfer-failing", "warning", "kv", kv_transfer_failing),
    advice="check the KV connector between the prefill and decode instances (NIXL side "
    "channel, network, the peer's health) and the offload store's free space",
    guide=Guide("NIXL / KV-offload transfers fail", "check the KV connector and the offload store"),
    alert=_kv_transfer_failing_alert,
)

FINDINGS = (PREFIX_CACHE_COLLAPSE, DECODE_STALL, SPEC_DECODE_LOW, LORA_WAITING, KV_TRANSFER_FAILING)
