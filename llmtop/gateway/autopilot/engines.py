"""How the autopilot reads each engine, in words from the engine's own dialect (core.dialects):
its KV figure where it has one (vLLM's cache, SGLang's token pool, TensorRT-LLM's KV
utilisation), else its slots and the TTFT the gateway measures; and the figures it lacks that a
step would wait for forever (an engine that counts no preemptions is stepped without them). Pure.
"""

from __future__ import annotations

from dataclasses import replace

from llmtop.core.derive.signals import EngineSignals
from llmtop.core.dialects.dialect import Dialect
from llmtop.core.dialects.engines import BY_KIND

USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


def engine_named(kinds: set[str | None]) -> str | None:
    """The engine kind of the replicas read this tick: one kind, or several joined with "+"
    (a fleet mixing engines), None when no replica's dialect was found."""
    known = sorted(k for k in kinds if k is not None)
    return "+".join(known) if known else None


def title(kind: str | None) -> str:
    """The engine's name as people say it (SGLang, llama.cpp), "the engine" when unknown."""
    d = _dialect(kind)
    return "the engine" if d is None else d.title


def kv_words(kind: str | None) -> str:
    """Where the KV budget's figures come from: "SGLang's token pool (sglang:token_usage of
    sglang:max_total_num_tokens)"; empty for an engine whose dialect is unknown."""
    d = _dialect(kind)
    if d is None:
        return ""
    if d.capacity is None:  # vLLM's own, or an engine that exports no KV capacity
        usage, capacity = USAGE, "vllm:cache_config_info"
        pool = "KV cache"
    else:
        usage, capacity = _own(d, USAGE), d.capacity[0]
        pool = "token pool" if d.capacity[1] is None else "KV cache"
    return f"{d.title}'s {pool} ({usage} of {capacity})"


def slots_words(kind: str | None) -> str:
    """How the cap by slots reads an engine with no KV figure: "llama.cpp's slots (/props
    total_slots, else llamacpp:requests_processing while llamacpp:requests_deferred > 0) and the
    TTFT the gateway measures: llama.cpp has exported no KV usage since ..."."""
    d = _dialect(kind)
    if d is None:
        return "the engine's slots and the TTFT the gateway measures: no KV figure in its /metrics"
    running, waiting = _own(d, RUNNING), _own(d, WAITING)
    lacks = d.lacks.get("kv_usage") or d.lacks.get("kv_capacity") or "no KV figure in its /metrics"
    field = SLOTS_FIELD.get(d.kind)
    said = f"{d.info_path} {field}, else " if field else ""
    return (
        f"{d.title}'s slots ({said}{running} while {waiting} > 0) and the TTFT the gateway"
        f" measures: {lacks}"
    )


def reads(kind: str | None, *, by_slots: bool) -> str:
    """How the autopilot reads this engine, in one line for /admin/stats' `autopilot.reads`."""
    if by_slots:
        return f"cap by {slots_words(kind)}"
    kv = kv_words(kind) or "the engine's KV cache"
    d = _dialect(kind)
    why = None if d is None else d.lacks.get("preemptions")
    extra = f"; no preemption count ({why}): trouble read from TTFT and ITL" if why else ""
    return f"KV budget from {kv}{extra}"


SLOTS_FIELD = {"llamacpp": "total_slots"}
"""Kind -> the field of its info endpoint (`Dialect.info_path`) that says its slots:
llama-server's /props `total_slots` (its -np)."""


def info_slots(kind: str | None) -> tuple[str, str] | None:
    """(the info endpoint's path, its field of slots) for an engine that says its slots there."""
    d = _dialect(kind)
    field = SLOTS_FIELD.get(d.kind) if d is not None else None
    return None if d is None or field is None else (d.info_path, field)


def slots_in(body: object, field: str) -> int | None:
    """The slots an info endpoint's JSON says (a positive whole number), else None."""
    value = body.get(field) if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def by_slots(kind: str | None, sig: EngineSignals) -> bool:
    """Whether this engine is capped by its slots rather than budgeted by KV: it exports no KV
    capacity (llama.cpp, TGI, LMDeploy), or by its nature no KV use (Dynamo's bare frontend:
    its capacity, but the use only on its workers); a use missing for a scrape holds instead."""
    if sig.kv_capacity_blocks is None:
        return True
    d = _dialect(kind)
    return sig.kv_usage_frac is None and d is not None and "kv_usage" in d.lacks


def without_preemptions(kind: str | None, sig: EngineSignals) -> EngineSignals:
    """The signals an engine that counts no preemptions (TensorRT-LLM, LMDeploy, Dynamo's
    frontend) is stepped with: none counted (0), so the step does not hold forever for a
    figure that will never come; its thrash is then judged only by TTFT and ITL."""
    d = _dialect(kind)
    if sig.preemptions is not None or d is None or "preemptions" not in d.lacks:
        return sig
    return replace(sig, preemptions=0.0)


def _dialect(kind: str | None) -> Dialect | None:
    """The dialect of `kind`; of a mixed fleet's ("a+b"), its first engine's."""
    return None if kind is None else BY_KIND.get(kind.split("+", 1)[0])


def _own(d: Dialect, vllm_name: str) -> str:
    """The engine's own name for one of vLLM's (the first it lists), vLLM's when it maps none."""
    return next((theirs for theirs, ours in d.renames.items() if ours == vllm_name), vllm_name)
