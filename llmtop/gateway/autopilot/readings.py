"""What the autopilot's steps read and weigh, pure: the figures every step needs (or the names
of those unknown), a preemption storm in the words users feel it, and the KV budget's safe
overcommit of the cache."""

from __future__ import annotations

import math

from llmtop.core.derive.signals import EngineSignals

Figures = tuple[float, float, float]
"""(preemptions per second, requests waiting, KV use 0..1): what every step reads."""


def required(sig: EngineSignals) -> tuple[Figures | None, list[str]]:
    """The figures every step reads, or None and the names of those unknown."""
    preempt, waiting, kv = sig.preemptions_per_s, sig.waiting, sig.kv_usage_frac
    if preempt is None or waiting is None or kv is None:
        named = (("preemptions", preempt), ("waiting", waiting), ("KV use", kv))
        return None, [name for name, v in named if v is None]
    return (preempt, waiting, kv), []


def overcommit(cap: int, held: float, per_request: float, use: float) -> float:
    """The largest budget whose KV blocks held stay under `use` x the cache with two standard
    deviations to spare, never below the cache: n requests of footprint f at independent, uniform
    stages of their lives hold held x n f blocks on average, give or take f (1 - held) / sqrt(3) x
    sqrt(n). Many small requests may go well past the cache; a few large ones may not."""
    h = max(held, 0.2)
    k = use * cap
    c = 2.0 * math.sqrt(per_request) * (1.0 - h) / math.sqrt(3.0)
    x = (-c + math.sqrt(c * c + 4.0 * h * k)) / (2.0 * h)  # x = sqrt(budget)
    return max(float(cap), x * x)


def felt_by_users(
    itl_s: float, ttft_p95_s: float | None, itl_at: float, ttft_at: float
) -> str | None:
    """What shows a preemption storm to users (the engine's mean ITL or TTFT p95 past its
    mark), in words; None when neither does: preemption nobody feels is the engine's business."""
    if itl_s > itl_at:
        return f"mean ITL {itl_s * 1000:.0f} ms > {itl_at * 1000:.0f} ms"
    if ttft_p95_s is not None and ttft_p95_s > ttft_at:
        return f"engine TTFT p95 {ttft_p95_s:.1f}s > {ttft_at:.1f}s"
    return None
