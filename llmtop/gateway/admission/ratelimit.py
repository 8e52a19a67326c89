"""Per-tenant token buckets (requests per minute), pure and driven by the caller's clock. A bucket
holds one second's worth of requests (at least one), so `rate_limit_rpm=60` allows one a second
and no burst beyond; the tenants' map is bounded (least recently seen dropped first), so a flood
of distinct keys cannot grow memory."""

from __future__ import annotations

from collections import OrderedDict

MAX_WAIT_S = 86_400.0
"""Longest wait reported (a day): a tiny rpm gives a huge or infinite one, and Retry-After
must stay a finite integer."""


class TenantRateLimiter:
    """Token buckets keyed by tenant; `check` charges one token or says how long to wait."""

    def __init__(self, rpm: float, *, max_tenants: int = 10_000) -> None:
        self.max_tenants = max_tenants
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()  # tenant -> [tokens, at]
        self.rpm = rpm

    @property
    def capacity(self) -> float:
        return max(1.0, self.rpm / 60.0)

    def set_rpm(self, rpm: float) -> None:
        """Change the rate; buckets keep their tokens, capped at the new capacity."""
        self.rpm = rpm
        cap = self.capacity
        for b in self._buckets.values():
            b[0] = min(b[0], cap)

    def check(self, tenant: str, now: float) -> float:
        """0.0 when the request may go (one token taken), else seconds until a token is due."""
        rate = self.rpm / 60.0
        cap = self.capacity
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = [cap, now]
            self._buckets[tenant] = bucket
            if len(self._buckets) > self.max_tenants:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(tenant)
            bucket[0] = min(cap, bucket[0] + (now - bucket[1]) * rate)
            bucket[1] = now
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0
            return 0.0
        if rate <= 0.0:  # an rpm so small it underflows to 0: a token never comes
            return MAX_WAIT_S
        return min((1.0 - bucket[0]) / rate, MAX_WAIT_S)

    def __len__(self) -> int:
        return len(self._buckets)
