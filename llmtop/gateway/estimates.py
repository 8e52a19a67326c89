"""What admission predicts from: how fast the admitted work drains (requests and KV blocks
finished per second) and how long the engine takes to a first token once a request reaches it.

These feed the Retry-After of a 429, the deadline queue's predicted start, the TTFT budget a
request may spend queued, and the autopilot's "turned over" signal. A new estimator (say, prompt
tokens prefilled per second, for a budget of prompt tokens not yet prefilled) goes here: fed
from the controller where a request starts, first answers (`first_token`) or ends
(`finished`), and read where the controller predicts a wait (`wait_s`).

Pure: every method takes `now` from the controller's clock.
"""

from __future__ import annotations

from llmtop.gateway.window import RateWindow

DRAIN_WINDOW_S = 10
"""Seconds of completions the drain rates (requests, KV blocks freed per second) span."""
ENGINE_TTFT_GAIN = 0.1
"""Smoothing of the engine-side TTFT estimate per sample (about the last 10 first tokens)."""
UNKNOWN_DRAIN_RETRY_S = 5.0
"""Retry-After when no request has completed recently (no drain rate to estimate from)."""


class Estimates:
    """The recent drain rates and the engine-side TTFT, updated as requests finish."""

    __slots__ = ("_drain", "_drain_blocks", "engine_ttft_s")

    def __init__(self) -> None:
        self._drain = RateWindow(DRAIN_WINDOW_S)
        self._drain_blocks = RateWindow(DRAIN_WINDOW_S)
        self.engine_ttft_s = 0.0
        """Recent engine-side TTFT (arrival at the engine to first byte), smoothed."""

    def finished(self, now: float, kv_blocks: int) -> None:
        """An admitted request ended (whatever its outcome): its slot and blocks are free."""
        self._drain.add(now)
        self._drain_blocks.add(now, kv_blocks)

    def first_token(self, seconds: float, queue_s: float) -> None:
        """A first token `seconds` after arrival, `queue_s` of them queued in the gateway."""
        engine_s = max(0.0, seconds - queue_s)
        self.engine_ttft_s += ENGINE_TTFT_GAIN * (engine_s - self.engine_ttft_s)

    def drain_rate(self, now: float) -> float | None:
        """Requests finished per second lately (None before the first)."""
        return self._drain.rate(now)

    def queue_budget_s(self, slo_s: float) -> float:
        """Seconds a request may wait in the queue and still meet a TTFT of `slo_s`."""
        return max(0.0, slo_s - self.engine_ttft_s)

    def retry_after_s(self, now: float, backlog: int, queue_timeout_s: float) -> float:
        """Seconds until `backlog` requests have drained at the recent completion rate."""
        rate = self._drain.rate(now)
        if not rate:
            # Nothing has completed recently, so there is no rate to go by: a short guess keeps
            # well-behaved clients from sleeping a whole queue_timeout on an idle-then-busy gateway.
            return max(1.0, min(queue_timeout_s, UNKNOWN_DRAIN_RETRY_S))
        return max(1.0, min(backlog / rate, 3600.0))

    def wait_s(self, now: float, requests_over: int, kv_blocks_over: int) -> float | None:
        """When the work beyond the free room has drained: `requests_over` requests and
        `kv_blocks_over` KV blocks more than the limits have free, over the measured drain
        rates (0 when nothing is over). None when a rate it needs is unknown."""
        waits = [0.0]
        if requests_over > 0:
            rate = self._drain.rate(now)
            if not rate:
                return None
            waits.append(requests_over / rate)
        if kv_blocks_over > 0:
            rate_b = self._drain_blocks.rate(now)
            if not rate_b:
                return None
            waits.append(kv_blocks_over / rate_b)
        return max(waits)
