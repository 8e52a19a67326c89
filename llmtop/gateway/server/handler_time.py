"""Handler time: what the gateway's request handler spends on one proxied request, the wall time
from the ASGI call to the last chunk handed to the server less the time queued and every wait on the
upstream (its head, each chunk). Known only at the body's end, it is a histogram in /metrics and
p50/p95 in /admin/stats, not a header (`x-llmtop-handler-to-headers-ms` carries the part known at
the head). Not the latency the gateway adds: docs/gateway.md, "Overhead"."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from llmtop.gateway.admission.window import CumulativeHistogram, SampleWindow

HANDLER_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
"""From 0.1 ms: an idle gateway's handler spends a few tenths of a millisecond on a stream."""


class HandlerTime:
    """Recent quantiles (for /admin/stats) and a cumulative histogram (for /metrics)."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window = SampleWindow(window_s)
        self.hist = CumulativeHistogram(HANDLER_BUCKETS_S)

    def observe(self, now: float, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.window.add(now, seconds)
        self.hist.observe(seconds)

    def quantiles(self, now: float) -> dict[str, float | None]:
        p50, p95 = self.window.quantiles(now, (0.5, 0.95))
        return {"p50": p50, "p95": p95}


class TimedResponse(aiohttp.ClientResponse):
    """An upstream response that knows how long it waited for its status line and headers.

    aiohttp calls `start` once the request line and headers are written, so building and writing
    the request count as the gateway's time and only the wait for the answer as the upstream's.
    """

    headers_wait_s: float | None = None

    async def start(self, connection: Any) -> aiohttp.ClientResponse:
        t = time.perf_counter()
        try:
            return await super().start(connection)
        finally:
            self.headers_wait_s = time.perf_counter() - t
