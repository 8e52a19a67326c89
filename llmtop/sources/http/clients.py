"""Where llmtop's HTTP clients are built. Three stacks, each where it was measured to earn its
place, each in one sentence:

- httpx (`http_client`, here): a few requests a second where a person reads the errors (one
  engine's /metrics and /version, the gateway's admin API behind the TUI's keys, dcgm-exporter,
  the what-if's scrapes).
- aiohttp: streams (the gateway's upstream, `gateway.server.app.make_session`, and the load
  generator, `load.runner.Runner`), at 0.46x httpx's CPU per proxied stream (BENCHMARKS.md
  section 2).
- the lean client (`lean_http.LeanClient`): the fleet's hundred reads a second (every replica's
  /metrics, Prometheus's answers), 0.7 % of a core below aiohttp at 100 replicas (BENCHMARKS.md
  "Speed paths in proportion").

The admin token is read once, by `settings.load`; the clients take the token, never the file.
"""

from __future__ import annotations

import urllib.request

import httpx

DEFAULT_TIMEOUT_S = 5.0
"""httpx's own default, for a client built without a timeout."""


class SchemeTransport(httpx.AsyncBaseTransport):
    """http:// through a transport that never builds a TLS context, https:// through httpx's
    own verified one, built when the first https request is sent.

    httpx builds a verified TLS context (the CA bundle read and parsed) for every client it
    makes, https or not: 0.06-0.2 s of CPU a client before the TUI's first frame (BENCHMARKS.md
    section 3, bench/bench_first_frame.py). A /metrics on loopback needs none."""

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
