"""What one gateway may hold while Redis is away so the gateways together stay within the global
cap (pure: times are arguments; docs/gateway.md). The grants sum to no more than the cap, so one
starting at min(its grant, cap / live) keeps the sum within it; it rises to `fallback_share` once
what others held could have ended (a lease TTL, the longest life here lately, none of its earlier
requests left). Back, it asks no more than it held until the live re-register or a TTL passes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmtop.core.derive.sliding_max import SlidingMax

LIFE_KEEP_S = 60.0
"""The longest life that sets a fallback's rise is the longest of the last this many seconds."""


def fallback_share(limit: int | None, live: int) -> int | None:
    """One gateway's share of a limit while Redis is away: limit / live gateways, at least 1."""
    if limit is None:
        return None
    return max(1, math.floor(limit / max(1, live)))


class Lives:
    """The requests in flight here with their admission times, and the longest life lately."""

    def __init__(self, keep_s: float = LIFE_KEEP_S) -> None:
        self._admitted: dict[int, float] = {}
        """Admission time by key, in admission order (the first is the oldest)."""
        self._longest: SlidingMax[None] = SlidingMax(keep_s)
        self.keep_s = keep_s

    def admitted(self, key: int, now: float) -> None:
        """A request went to the engine at `now` (times in order)."""
        self._admitted[key] = now

    def ended(self, key: int, now: float) -> None:
        """It ended (any outcome); its life counts toward the longest lately."""
        at = self._admitted.pop(key, None)
        if at is not None:
            self._longest.add("", now, now - at, None)

    def oldest_admitted(self) -> float | None:
        """Admission time of the oldest request in flight; None when none is."""
        return next(iter(self._admitted.values()), None)

    def longest_s(self, now: float) -> float:
        """The longest life of a request ended in the last `keep_s` seconds (0: none)."""
        row = self._longest.most("", now - self.keep_s)
        return 0.0 if row is None else row[1]


@dataclass
class Fallback:
    """One spell without Redis: the grant held when it began and when the share may follow."""

    since: float
    """When Redis went away (the controller's clock)."""
    grant_slots: int | None
    """Slots this gateway was granted then (None: no shared cap then)."""
    grant_kv_blocks: int | None
    """KV blocks it was granted then (None: no KV cap then)."""
    rise_after_s: float
    """Seconds after `since` before the share may be taken: the lease TTL or the longest life."""
    risen: bool = False

    @classmethod
    def begin(
        cls,
        now: float,
        grant_slots: int | None,
        grant_kv_blocks: int | None,
        ttl_s: float,
        longest_life_s: float,
    ) -> Fallback:
        return cls(now, grant_slots, grant_kv_blocks, max(ttl_s, longest_life_s))

    def limits(
        self,
        now: float,
        cap_slots: int | None,
        cap_kv_blocks: int | None,
        live: int,
        oldest_admitted: float | None,
    ) -> tuple[int | None, int | None]:
        """(slots, KV blocks) this gateway may hold now: min(grant, share), the share once
        risen (see the module docstring). `oldest_admitted`: admission time of its oldest
        request in flight (None: none)."""
        share_s, share_b = fallback_share(cap_slots, live), fallback_share(cap_kv_blocks, live)
        if not self.risen:
            drained = oldest_admitted is None or oldest_admitted >= self.since
            self.risen = drained and now - self.since >= self.rise_after_s
        if self.risen:
            return share_s, share_b
        return _least(self.grant_slots, share_s), _least(self.grant_kv_blocks, share_b)


def _least(grant: int | None, share: int | None) -> int | None:
    """The smaller; a grant of None (no cap when Redis went away) leaves the share."""
    if share is None:
        return None
    return share if grant is None else min(grant, share)


@dataclass
class Rejoin:
    """Back from a fallback: ask for no more than `limit_slots` / `limit_kv_blocks` until
    `live` gateways are registered again or `until` has passed."""

    limit_slots: int | None
    limit_kv_blocks: int | None
    live: int
    until: float | None = None
    """Set at the first answer: that time plus one lease TTL."""

    def clamp(self, want_slots: int, want_kv_blocks: int) -> tuple[int, int]:
        """What to ask Redis for meanwhile."""
        s = want_slots if self.limit_slots is None else min(want_slots, self.limit_slots)
        b = (
            want_kv_blocks
            if self.limit_kv_blocks is None
            else min(want_kv_blocks, self.limit_kv_blocks)
        )
        return s, b

    def over(self, now: float, live: int) -> bool:
        """The others are back (or one TTL passed since the first answer): ask freely."""
        return live >= self.live or (self.until is not None and now >= self.until)


__all__ = ["LIFE_KEEP_S", "Fallback", "Lives", "Rejoin", "fallback_share"]
