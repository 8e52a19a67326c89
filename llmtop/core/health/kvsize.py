"""What one concurrency slot costs in KV tokens and how many fit: the one sizing every rule,
panel and the what-if uses (`kv_size`), with its arithmetic printed beside the figures. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.health.kv_maxima import SIZE_LOOKBACK_S, KvMaxima
from llmtop.core.health.thresholds import HealthSettings

KV_TARGET_FRAC = HealthSettings.kv_target_frac
"""The default share of the cache `kv_size` fills (callers without settings: the what-if)."""


@dataclass(frozen=True)
class KvHeld:
    """What each running sequence held at one poll: usage x capacity / running."""

    usage_frac: float
    running: float
    tokens: float
    ago_s: float


_BUDGETS: dict[tuple[int, float], str] = {}
"""(capacity, target) -> `KvSize.budget`'s text: kv-exhausted states it for every full
replica at every poll, and it changes only with the cache size or the target."""
_BUDGETS_KEPT = 256


@dataclass(frozen=True)
class KvSize:
    """What one concurrency slot costs in KV tokens, and how many slots the cache holds."""

    capacity_tokens: int
    block_size: int | None
    prompt_tokens: float | None
    """Mean prompt of the requests that finished in the window (None before any did)."""
    output_tokens: float | None
    held: KvHeld | None
    """The most a running sequence held over `SIZE_LOOKBACK_S` (None when nothing ran)."""
    per_request_tokens: float
    fits: int
    target_frac: float
    """The share of the cache the count may fill (HealthSettings.kv_target_frac)."""

    @property
    def budget_tokens(self) -> int:
        """The KV tokens the count divides: the capacity at the target fill, whole tokens."""
        return math.floor(self.capacity_tokens * self.target_frac)

    @property
    def by_held(self) -> bool:
        """Sized by what running sequences held (larger than the finished requests' mean)."""
        return self.held is not None and self.per_request_tokens == math.ceil(self.held.tokens)

    def basis(self) -> str:
        """Where the size per request comes from: the mean, or what running sequences held."""
        if self.by_held and self.held is not None:
            h = self.held
            when = "now" if h.ago_s < 0.5 else f"{h.ago_s:.0f} s ago"
            share = f"{h.usage_frac * 100:.1f}%"  # to a tenth: whole percents can move a block
            held = f"{share} of the cache held by {fmt.count(h.running)} running"
            return f"{held} {when}"
        return f"{fmt.count(self.prompt_tokens)} prompt + {fmt.count(self.output_tokens)} output"

    def budget(self) -> str:
        """The tokens divided, with the capacity and target they come from."""
        key = (self.capacity_tokens, self.target_frac)
        text = _BUDGETS.get(key)
        if text is None:
            text = (
                f"{fmt.count(self.budget_tokens)} KV tokens ({self.target_frac * 100:g}% target "
                f"of {fmt.count(self.capacity_tokens)})"
            )
            # Cached only for positive inputs: equal keys then print alike (0.0 and -0.0,
            # equal as keys, would not), and a fleet has a few cache sizes, not thousands.
            if self.capacity_tokens > 0 and self.target_frac > 0:
                if len(_BUDGETS) >= _BUDGETS_KEPT:
                    _BUDGETS.clear()
                _BUDGETS[key] = text
        return text

    def division(self) -> str:
        """Budget / size per request, in blocks when known: the sum behind `fits`."""
        blocks = f" in {self.block_size}-token blocks" if self.block_size else ""
        return f"{self.budget()} / {fmt.count(self.per_request_tokens)} tokens per request{blocks}"

    def arithmetic(self) -> str:
        """The sum that gives `fits` with its inputs, so the printed figures produce it."""
        blocks = f" in {self.block_size}-token blocks" if self.block_size else ""
        return (
            f"{self.budget()} / {fmt.count(self.per_request_tokens)} "
            f"tokens per request ({self.basis()}){blocks} = {self.fits} sequences fit"
        )


def _held(e: EngineStats, kv_maxima: KvMaxima | None, now: float | None) -> KvHeld | None:
    """The most KV per running sequence at this poll and the earlier ones of the look-back
    (this poll first, then the newest of equals)."""
    most = e.kv_tokens_per_running
    best = None if most is None else (e.kv_cache_usage_frac or 0.0, e.running or 0.0, 0.0)
    found = None
    if kv_maxima is not None and now is not None:
        found = kv_maxima.held.most(e.url, now - SIZE_LOOKBACK_S)
    if found is not None and (most is None or found[1] > most):
        t, most, (usage, running) = found
        best = (usage, running, now - t if now is not None else 0.0)
    if best is None or most is None:
        return None
    return KvHeld(best[0], best[1], most, max(0.0, best[2]))


def kv_size(
    e: EngineStats,
    history: Sequence[Snapshot] = (),
    now: float | None = None,
    target_frac: float = KV_TARGET_FRAC,
    *,
    kv_maxima: KvMaxima | None = None,
) -> KvSize | None:
    """What a sequence costs in KV and how many fit (every rule and panel sizes so): a slot costs
    the larger of the window's finished mean (prompt + output) and the most KV a running sequence
    held over `SIZE_LOOKBACK_S` (`kv_maxima`, else from `history`). Fits: whole blocks less vLLM's
    null block, (blocks - 1) / ceil(cost / block size), else capacity / cost, at `target_frac`.
    None: capacity unknown, or nothing ran or finished. Why: docs/snapshot.md, "Why the KV size"."""
    cap = e.kv_capacity_tokens
    if cap is None or not math.isfinite(cap) or cap <= 0:
        return None
    if kv_maxima is None and history and now is not None:
        kv_maxima = KvMaxima.of_history(history, 0.0)
    held = _held(e, kv_maxima, now)
    mean = (
        e.mean_prompt_tokens + (e.mean_generation_tokens or 0.0)
        if e.mean_prompt_tokens is not None
        else None
    )
    candidates = [
        v
        for v in (mean, held.tokens if held else None)
        if v is not None and v > 0 and math.isfinite(v)  # a NaN or 1e309 figure sizes nothing
    ]
    if not candidates:
        return None
    per_req = math.ceil(max(candidates))  # whole tokens, as printed: the figures give `fits`
    target = min(1.0, target_frac) if target_frac > 0 else 1.0
    budget = math.floor(cap * target)
    block = e.kv_block_size
    if block and block > 0:
        fits = max(1, (budget // block - 1) // math.ceil(per_req / block))
    else:
        fits = max(1, math.floor(budget / per_req))
    prompt = e.mean_prompt_tokens if mean is not None else None
    output = e.mean_generation_tokens if mean is not None else None
    return KvSize(cap, block, prompt, output, held, per_req, fits, target)


def kv_fit(
    e: EngineStats,
    history: Sequence[Snapshot] = (),
    now: float | None = None,
    target_frac: float = KV_TARGET_FRAC,
) -> int | None:
    """Sequences that fit in the KV cache (`kv_size`); None when unknown."""
    size = kv_size(e, history, now, target_frac)
    return size.fits if size is not None else None
