"""Handler time: what the gateway's request handler spends on one proxied request, the queue
and the upstream taken out.

The proxy takes the wall time from the moment the ASGI app is called until the last chunk is
handed to the server, and subtracts the time queued in admission and every wait on the upstream
(for its status line and headers, and for each chunk). What is left is the request path,
building and writing the upstream request, the response headers and the relaying of every
chunk. It is known only once the body has ended, so it cannot be a response header: it is a
histogram in /metrics and p50/p95 in /admin/stats (the `x-llmtop-handler-to-headers-ms` header
carries the part known when the headers go out).

It is not the latency the gateway adds, and is not named so: the server's parsing of the request
before the handler runs, the upstream client's parsing of the answer while the handler waits,
and the extra hop over the network are outside any handler. bench/bench_gateway.py prints both
side by side.
"""

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
