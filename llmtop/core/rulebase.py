"""The vocabulary of the health rules: what a rule sees (`Context`), what it says (`Verdict`),
and what it is (`Rule`), plus helpers the rule modules share. Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from llmtop.core.snapshot import (
    Bottleneck,
    EngineStats,
    Finding,
    GatewayStats,
    GpuStats,
    Severity,
    Snapshot,
)
from llmtop.core.thresholds import HealthSettings


@dataclass(frozen=True)
class Context:
    """What the rules see at one poll."""

    time: float
    engines: tuple[EngineStats, ...]
    gateway: GatewayStats | None
    gpus: tuple[GpuStats, ...]
    settings: HealthSettings
    history: Sequence[Snapshot] = ()
    """Earlier snapshots, oldest first (the pipeline keeps ~10 minutes)."""
    last_progress: dict[str, float] = field(default_factory=dict)
    """Engine URL -> last time its token counters moved."""
    max_num_seqs: int | None = None


@dataclass(frozen=True)
class Verdict:
    """A rule that holds: the evidence and the fix, with optional overrides of the rule's class."""

    summary: str
    action: str
    severity: Severity | None = None
    bottleneck: Bottleneck | None = None


@dataclass(frozen=True)
class Rule:
    """One health rule: an id, its default class, and a pure check."""

    id: str
    severity: Severity
    bottleneck: Bottleneck
    check: Callable[[Context], Verdict | None]
    immediate: bool = False
    """Fire and clear without hysteresis (the fact itself is not noisy: a target is down)."""


def up_engines(ctx: Context) -> list[EngineStats]:
    return [e for e in ctx.engines if e.up and not e.stats_disabled]


def where(ctx: Context, e: EngineStats) -> str:
    return f"{e.url}: " if len(ctx.engines) > 1 else ""


def kv_fit(e: EngineStats) -> int | None:
    """Sequences that fit in the KV cache at the mean request size.

    vLLM allocates whole blocks and keeps one back (the null block), so with the block size
    known this is (blocks - 1) / ceil(tokens per request / block size): with 128-token blocks and
    1,000-token requests the token-only count said 4, and a cap of 4 still preempted on a real
    vLLM 0.32 while 3 did not. Without a block size it falls back to capacity / tokens.
    """
    if e.kv_capacity_tokens is None or e.mean_prompt_tokens is None:
        return None
    per_req = e.mean_prompt_tokens + (e.mean_generation_tokens or 0.0)
    if per_req <= 0:
        return None
    block = e.kv_block_size
    if block and block > 0:
        usable_blocks = e.kv_capacity_tokens // block - 1
        return max(1, usable_blocks // math.ceil(per_req / block))
    return max(1, math.floor(e.kv_capacity_tokens / per_req))


def cap_action(n: int | None, why: str, ctx: Context | None = None) -> str:
    """Advice to cap concurrency at ~n, read against the watched gateway (in `ctx`).

    Two cases where "press -" would be wrong: vLLM runs more than the gateway has in flight
    (traffic reaches it around the gateway, so no gateway cap can help), and the gateway's cap
    is already at or below n (seconds after `:cap`, the window still holds what came before).
    """
    gw = ctx.gateway if ctx is not None else None
    if ctx is not None and gw is not None and gw.up and n is not None:
        running = sum(e.running or 0.0 for e in ctx.engines if e.up)
        # +1: the two are scraped a moment apart, and an admission can fall in between
        if gw.in_flight is not None and running > gw.in_flight + 1:
            return (
                f"{why}: vLLM runs {running:.0f} but the gateway has {gw.in_flight} in flight, "
                "so traffic reaches vLLM around it: point clients at the gateway "
                f"(cap ~{n}), or restart vLLM with --max-num-seqs {n}"
            )
        if gw.max_concurrency is not None and gw.max_concurrency <= n:
            return (
                f"{why}, but the gateway cap ({gw.max_concurrency}) is already at or below ~{n}: "
                "this clears once the window has passed the time before the cap"
            )
    if n is None:
        return (
            f"{why}: cap concurrency at the gateway (press - or :cap N, gateway max_concurrency) "
            "so the excess waits there with a timeout, or restart vLLM with a lower --max-num-seqs"
        )
    return (
        f"{why}: cap concurrency at ~{n}: press - or :cap {n} (gateway max_concurrency), "
        f"or restart vLLM with --max-num-seqs {n}"
    )


_CAP_ADVICE = re.compile(r"press - or :cap (\d+)\b")
"""The instruction `cap_action` writes when a lower gateway cap is the fix."""
_SEVERITY_RANK = {"critical": 0, "warning": 1}


def suggested_cap(findings: Iterable[Finding]) -> tuple[int, Finding] | None:
    """The cap the findings tell the user to type now, and the finding that says so.

    Read from the action itself (the `:cap N` that `cap_action` writes), so the demo's banner
    and `--apply-cap auto` follow exactly what the screen shows: the most severe finding that
    advises a cap, the oldest first among equals (the order the screen lists them). None when
    none does: nothing is wrong, the gateway cap is already at or below the suggestion, or
    traffic goes around the gateway.
    """
    ranked = sorted(
        findings,
        key=lambda f: (_SEVERITY_RANK.get(f.severity, 2), f.since if f.since is not None else 0.0),
    )
    for f in ranked:
        m = _CAP_ADVICE.search(f.action)
        if m:
            return int(m.group(1)), f
    return None


def kv_peak(ctx: Context, e: EngineStats) -> float | None:
    """Highest KV usage over the window: preemption frees blocks, so a full cache oscillates."""
    values = [e.kv_cache_usage_frac]
    for i, snap in enumerate(reversed(ctx.history)):
        # The window, and at least the previous poll (its start when polls are a window apart).
        if i > 0 and snap.time < ctx.time - ctx.settings.window_s:
            break
        values += [p.kv_cache_usage_frac for p in snap.engines if p.url == e.url and p.up]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def kv_pressed(ctx: Context, e: EngineStats) -> bool:
    """KV at its high mark within the window, with preemptions or requests waiting."""
    peak = kv_peak(ctx, e)
    if peak is None or peak < ctx.settings.kv_high_frac:
        return False
    if e.preemptions_per_s:
        return True
    waiting = e.waiting_capacity if e.waiting_capacity is not None else e.waiting
    return bool(waiting)
