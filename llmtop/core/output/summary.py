"""`llmtop snapshot`'s verdict as its JSON object and as a compact summary. The JSON
(docs/snapshot.md) is a contract for scripts: every key present, null where unknown or not
finite; the exit code follows the status. Both say which poll each thing is from: the figures
and `findings` the last's, the KV peak its own, findings held only earlier their polls.
"""

from __future__ import annotations

import math
from typing import Any

from llmtop.core.base import format as fmt
from llmtop.core.base.admin_api import LIMIT_FIELDS
from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, GpuStats, Status
from llmtop.core.base.window import KvPeak, WindowFinding, WindowSnapshot
from llmtop.core.dialects.catalog import described, lacking
from llmtop.core.findings.catalog import DEFINITIONS

EXIT_CODES: dict[Status, int] = {"ok": 0, "degraded": 1, "critical": 2, "unknown": 3}

ENGINE_KEYS = (
    "url",
    "up",
    "model",
    "running",
    "waiting",
    "waiting_capacity",
    "kv_cache_usage_frac",
    "kv_capacity_tokens",
    "prompt_tok_per_s",
    "decode_tok_per_s",
    "preemptions_per_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "itl_p95_s",
    "e2e_p95_s",
    "queue_time_p95_s",
    "error",
    # the field guide's figures: null when the engine does not export the family
    "prefix_cache_hit_frac",
    "spec_acceptance_frac",
    "spec_mean_accepted_len",
    "spec_acceptance_by_pos",
    "kv_transfer_bytes_per_s",
    "kv_transfer_failures_per_s",
    "sleep_state",
    "healthy",
    "corrupted_per_s",
    "unread",
)
GATEWAY_KEYS = (
    "url",
    "up",
    "error",
    "in_flight",
    "queued",
    *LIMIT_FIELDS,  # the one table of the gateway's limits
    "binding",
    "binding_reason",
    "unprefilled_prompt_tokens",
    "paused",
    "rejected_per_s",
    "queue_wait_p50_s",
    "queue_wait_p95_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "upstream_healthy",
)
GPU_KEYS = (
    "index",
    "name",
    "source",
    "util_frac",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "power_limit_w",
    "temp_c",
    "sm_clock_mhz",
    "throttle_reasons",
    "xid_last",
    "ecc_uncorrectable",
)


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


COUNT_KEYS = frozenset({"running", "waiting", "waiting_capacity"})
"""Gauges that count requests: written as integers."""


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    out = {k: _clean(getattr(obj, k)) for k in keys}
    for k in COUNT_KEYS & out.keys():
        if isinstance(out[k], float) and out[k].is_integer():
            out[k] = int(out[k])
    return out


def _seconds(s: float) -> float | None:
    """An offset into the window, to the millisecond; None when not finite."""
    return round(s, 3) if math.isfinite(s) else None


def finding_json(f: Finding) -> dict[str, Any]:
    """A finding's id, severity, bottleneck and words (the fleet's rows list theirs so)."""
    return {
        "id": f.id,
        "severity": f.severity,
        "bottleneck": f.bottleneck,
        "summary": f.summary,
        "action": f.action,
    }


def _finding(w: WindowFinding) -> dict[str, Any]:
    return finding_json(w.finding) | {
        "first_s": _seconds(w.first_s),
        "last_s": _seconds(w.last_s),
        "held_polls": w.held_polls,
    }


def engine_json(e: EngineStats) -> dict[str, Any]:
    """Which engine answers, in its dialect: its kind, name and version, what is odd about its
    exposition, and each figure it does not export with why (those figures are null)."""
    title, lacks = described(e.engine)
    return {
        "kind": e.engine,
        "name": title,
        "version": e.version,
        "note": e.engine_note,
        "lacks": lacks,
    }


def _engine_json(e: EngineStats, peak: KvPeak | None) -> dict[str, Any]:
    out = _pick(e, ENGINE_KEYS)
    out["engine"] = engine_json(e) if e.up else None  # down: which engine is unknown
    shown = peak if e.up else None
    out["kv_cache_usage_peak_frac"] = None if shown is None else _clean(shown.frac)
    out["kv_cache_usage_peak_s"] = None if shown is None else _seconds(shown.at_s)
    if e.spec_acceptance_frac is None:
        out["spec_acceptance_by_pos"] = None  # no speculative decoding: unknown, not []
    if not e.up:
        out["unread"] = None
    lora = e.lora
    out["lora"] = (
        None
        if lora is None
        else {
            "max_loras": lora.max_loras,
            "running": list(lora.running),
            "waiting": list(lora.waiting),
        }
    )
    out["restarted_at"] = None if e.restarted_at is None else fmt.utc_iso(e.restarted_at)
    return out


def to_json(w: WindowSnapshot) -> dict[str, Any]:
    """The `llmtop snapshot --json` object."""
    snap = w.last
    return {
        "time": fmt.utc_iso(snap.time),
        "window": {
            "start": fmt.utc_iso(w.start),
            "span_s": _seconds(w.span_s),
            "polls": w.polls,
            "interval_s": _clean(w.interval_s),
        },
        "status": snap.status,
        "engines": [_engine_json(e, w.kv_peaks.get(e.url)) for e in snap.engines],
        "gateway": None if snap.gateway is None else _pick(snap.gateway, GATEWAY_KEYS),
        "gpus": [_pick(g, GPU_KEYS) for g in snap.gpus],
        "gpu_error": snap.gpu_error,
        "findings": [_finding(f) for f in w.findings],
        "earlier_findings": [_finding(f) for f in w.earlier],
        "unavailable_findings": unavailable(snap.engines),
    }


UNAVAILABLE_KEYS = ("engine", "finding", "why")


def unavailable(engines: tuple[EngineStats, ...]) -> list[dict[str, Any]]:
    """The findings not judged on an engine because its dialect lacks a figure they need:
    each with the engine and why (empty for vLLM, which exports them all)."""
    out = []
    for e in engines:
        if not e.up:
            continue
        for d in DEFINITIONS:
            why = lacking(e.engine, d.needs) if d.needs else None
            if why is not None:
                out.append(dict(zip(UNAVAILABLE_KEYS, (e.url, d.rule.id, why), strict=True)))
    return out


def offset(s: float) -> str:
    """Seconds after the window's first poll: '+4.0 s'."""
    return f"+{s:.1f} s"


def _engine_lines(e: EngineStats, peak: KvPeak | None) -> list[str]:
    title, lacks = described(e.engine)
    engine = f"({title} {e.version})" if e.version else f"({title})"
    name = " ".join(x for x in (e.model, engine) if x)
    if not e.up:
        return [f"engine {e.url}  DOWN: {e.error}"]
    if e.stats_disabled:
        return [f"engine {e.url}  {name}  up, but {e.error}"]
    waiting = fmt.count(e.waiting)
    if e.waiting_capacity is not None:
        waiting += f" ({fmt.count(e.waiting_capacity)} for capacity)"
    kv = fmt.frac(e.kv_cache_usage_frac)
    if peak is not None:
        kv += f" (peak {fmt.frac(peak.frac)} at {offset(peak.at_s)})"
    per_seq = (
        f" ({fmt.tok_per_s(e.decode_tok_per_s_per_seq)} per seq)"
        if e.decode_tok_per_s_per_seq is not None
        else ""
    )
    note = [f"  note: {x}" for x in (e.error, e.engine_note) if x]
    note += [f"  n/a: {why}" for why in dict.fromkeys(lacks.values())]
    field = field_line(e)
    return [
        f"engine {e.url}  {name}".rstrip(),
        *note,
        f"  running {fmt.count(e.running)}  waiting {waiting}  KV {kv}"
        f" of {fmt.count(e.kv_capacity_tokens)} tokens  preemptions "
        f"{fmt.per_s(e.preemptions_per_s)}",
        f"  prefill {fmt.tok_per_s(e.prompt_tok_per_s)}  decode "
        f"{fmt.tok_per_s(e.decode_tok_per_s)}{per_seq}",
        f"  TTFT p50/p95/p99 {fmt.seconds(e.ttft_p50_s)} / {fmt.seconds(e.ttft_p95_s)} / "
        f"{fmt.seconds(e.ttft_p99_s)}  ITL p95 {fmt.seconds(e.itl_p95_s)}  E2E p95 "
        f"{fmt.seconds(e.e2e_p95_s)}  queue p95 {fmt.seconds(e.queue_time_p95_s)}",
        *([f"  {field}"] if field else []),
    ]


def field_line(e: EngineStats) -> str:
    """The field guide's families an engine exports, in one line ("" when none is): prefix
    cache, speculative decoding, LoRA, KV transfer, sleep, health."""
    parts = []
    if e.prefix_cache_hit_frac is not None:
        parts.append(f"prefix cache {fmt.frac(e.prefix_cache_hit_frac)} hit")
    if e.spec_acceptance_frac is not None:
        pos = "/".join(fmt.frac(p) for p in e.spec_acceptance_by_pos[:4])
        parts.append(
            f"spec {fmt.frac(e.spec_acceptance_frac)} accepted, "
            f"{e.spec_mean_accepted_len or 0.0:.2f}/step" + (f" ({pos})" if pos else "")
        )
    if e.lora is not None:
        slots = "--" if e.lora.max_loras is None else str(e.lora.max_loras)
        parts.append(f"LoRA {len(e.lora.running)}/{slots} running, {len(e.lora.waiting)} waiting")
    if e.kv_transfer_bytes_per_s is not None or e.kv_transfer_failures_per_s is not None:
        parts.append(
            f"KV transfer {fmt.per_s(e.kv_transfer_bytes_per_s, ' B/s')}, "
            f"{fmt.per_s(e.kv_transfer_failures_per_s)} failed"
        )
    if e.sleep_state not in (None, "awake"):
        parts.append(f"ASLEEP ({e.sleep_state})")
    if e.healthy is False:
        parts.append("UNHEALTHY")
    return "  ".join(parts)


def _gateway_line(g: GatewayStats) -> str:
    if not g.up:
        return f"gateway {g.url}  DOWN: {g.error}"
    rejected = sum(g.rejected_per_s.values()) if g.rejected_per_s else None
    paused = "  PAUSED" if g.paused else ""
    return (
        f"gateway {g.url}  in flight {fmt.count(g.in_flight)}/{fmt.count(g.max_concurrency)}  "
        f"queued {fmt.count(g.queued)}/{fmt.count(g.max_queue)}  429s {fmt.per_s(rejected)}  "
        f"queue wait p95 {fmt.seconds(g.queue_wait_p95_s)}{paused}"
    )


def _gpu_line(g: GpuStats) -> str:
    mem = f"{fmt.gib(g.mem_used_bytes)}/{fmt.gib(g.mem_total_bytes)}"
    throttle = f"  throttled: {', '.join(g.throttle_reasons)}" if g.throttle_reasons else ""
    power = fmt.watts(g.power_w)
    if g.power_limit_w is not None:
        power += f"/{fmt.watts(g.power_limit_w)}"
    return (
        f"gpu {g.index} {g.name or ''}  util {fmt.frac(g.util_frac)}  mem {mem}  "
        f"{power}  {fmt.celsius(g.temp_c)}  "
        f"SM {fmt.mhz(g.sm_clock_mhz)}{throttle}"
    )


def _finding_lines(w: WindowFinding, polls: int) -> list[str]:
    f = w.finding
    held = (
        f"at {offset(w.last_s)}"
        if w.first_s == w.last_s
        else f"from {offset(w.first_s)} to {offset(w.last_s)}"
    )
    return [
        f"  {f.severity.upper()} {f.id} [{f.bottleneck}] {f.summary}",
        f"    -> {f.action}",
        f"    held {held} ({w.held_polls} of {polls} polls)",
    ]


def _header(w: WindowSnapshot) -> list[str]:
    snap = w.last
    title = f"llmtop snapshot  {fmt.utc_iso(snap.time)}  status {snap.status.upper()}"
    if w.polls == 1:
        return [title, "one poll: no engine answered, so the window was not waited out"]
    return [
        title,
        f"window {w.span_s:.1f} s from {fmt.utc_iso(w.start)}: {w.polls} polls (interval "
        f"{w.interval_s:g} s); figures and verdict from the last poll ({offset(w.span_s)}), "
        "its rates and quantiles over the whole window",
    ]


def to_text(w: WindowSnapshot) -> str:
    """The compact human summary."""
    snap = w.last
    lines = _header(w)
    for e in snap.engines:
        lines.extend(_engine_lines(e, w.kv_peaks.get(e.url) if e.up else None))
    if snap.gateway is not None:
        lines.append(_gateway_line(snap.gateway))
    lines.extend(_gpu_line(g) for g in snap.gpus)
    if not snap.gpus and snap.gpu_error:
        lines.append(f"gpu: {snap.gpu_error}")
    if w.findings:
        lines.append(f"findings at the last poll ({offset(w.span_s)}):")
        for f in w.findings:
            lines.extend(_finding_lines(f, w.polls))
    elif snap.status == "ok":
        lines.append("no findings at the last poll")
    elif snap.status == "unknown":
        lines.append("status unknown: no engine answered with its core metrics yet")
    if w.earlier:
        lines.append(
            "earlier in the window, cleared by the last poll (figures of the poll it last held):"
        )
        for f in w.earlier:
            lines.extend(_finding_lines(f, w.polls))
    return "\n".join(lines)
