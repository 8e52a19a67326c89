"""Where llmtop's HTTP clients are built: two stacks, each where it was measured to fit.

- httpx (`http_client`, here): where a person reads the errors, a few requests a second: the one
  engine's /metrics and /version, the gateway's admin API (the TUI's keys), dcgm-exporter,
  the what-if's reads.
- aiohttp: where requests come by the hundred a second, at a fifth of httpx's CPU a request
  (`bench/bench_fleet.py --mode clients`): the fleet's reads (`scrape_client.ScrapeClient`),
  the gateway's upstream streams and the load generator (0.46x httpx's CPU a stream).
"""

from __future__ import annotations

import urllib.request

import httpx

DEFAULT_TIMEOUT_S = 5.0
"""httpx's own default, for a client built without a timeout."""


class SchemeTransport(httpx.AsyncBaseTransport):
    """http:// through a transport that never builds a TLS context (httpx builds one per client,
    https or not), https:// through httpx's verified one, made at the first https request: buys
    0.06-0.2 s of CPU before the first frame (docs/tui.md, "Cost"; BENCHMARKS §3).
    """

    def __init__(self) -> None:
        self._plain = httpx.AsyncHTTPTransport(verify=False)  # its requests are all http://
        self._tls: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return await self._plain.handle_async_request(request)
        if self._tls is None:
            self._tls = httpx.AsyncHTTPTransport()  # verified, SSL_CERT_FILE honoured
        return await self._tls.handle_async_request(request)

    async def aclose(self) -> None:
        await self._plain.aclose()
        if self._tls is not None:
            await self._tls.aclose()


def http_client(
    timeout_s: float = DEFAULT_TIMEOUT_S, *, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """An httpx client: `timeout_s` for each of connect, read, write and pool; redirects not
    followed (an admin API or a /metrics that redirects is answered as it stands); `transport`
    for tests (httpx.MockTransport, ASGITransport). Without a proxy in the environment
    (which a transport of our own would bypass), `SchemeTransport`."""
    if transport is None and not urllib.request.getproxies():
        transport = SchemeTransport()
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s), transport=transport, follow_redirects=False
    )
