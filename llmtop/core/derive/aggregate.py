"""Several engines seen as one: the single rule for the TUI's panels and charts, the report's
series and the headless demo's figures. Counts and rates are summed over the engines that answer,
usage and latencies are the worst engine's; None stays None (unknown is not zero)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from llmtop.core.base.snapshot import EngineStats


def sum_known(values: Sequence[float | None]) -> float | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def max_known(values: Sequence[float | None]) -> float | None:
    """The largest known value; None when none is known."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def combine(engines: Sequence[EngineStats]) -> EngineStats | None:
    """One engine as is; several as one: counts and rates summed, usage and latencies the worst."""
    if not engines:
        return None
    if len(engines) == 1:
        return engines[0]
    up = [e for e in engines if e.up] or list(engines)
    first = up[0]
    cap = [e.kv_capacity_tokens for e in up]
    return replace(
        first,
        url=f"{len(engines)} engines",
        up=any(e.up for e in engines),
        error="; ".join(e.error for e in engines if e.error) or None,
        running=sum_known([e.running for e in up]),
        waiting=sum_known([e.waiting for e in up]),
        waiting_capacity=sum_known([e.waiting_capacity for e in up]),
        kv_cache_usage_frac=max_known([e.kv_cache_usage_frac for e in up]),
        kv_capacity_tokens=None if any(c is None for c in cap) else sum(c or 0 for c in cap),
        prompt_tok_per_s=sum_known([e.prompt_tok_per_s for e in up]),
        decode_tok_per_s=sum_known([e.decode_tok_per_s for e in up]),
        decode_tok_per_s_per_seq=max_known([e.decode_tok_per_s_per_seq for e in up]),
        preemptions_per_s=sum_known([e.preemptions_per_s for e in up]),
        ttft_p50_s=max_known([e.ttft_p50_s for e in up]),
        ttft_p95_s=max_known([e.ttft_p95_s for e in up]),
        ttft_p99_s=max_known([e.ttft_p99_s for e in up]),
        itl_p50_s=max_known([e.itl_p50_s for e in up]),
        itl_p95_s=max_known([e.itl_p95_s for e in up]),
        itl_p99_s=max_known([e.itl_p99_s for e in up]),
        e2e_p95_s=max_known([e.e2e_p95_s for e in up]),
        queue_time_p50_s=max_known([e.queue_time_p50_s for e in up]),
        queue_time_p95_s=max_known([e.queue_time_p95_s for e in up]),
    )
