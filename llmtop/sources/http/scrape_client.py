"""The fleet's HTTP client: aiohttp reads of every replica's /metrics and Prometheus's answers,
bounded in time and size, each failure an exception whose words name the problem.

aiohttp, the gateway's upstream client already, not httpx (`clients.http_client`): a hundred
replicas a second over httpx cost ~5x the CPU (`bench/bench_fleet.py --mode clients`). Its own
module so that the TUI's first frame, which reads one engine over httpx, does not import aiohttp.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import aiohttp


class HttpError(Exception):
    """A request that gave no answer; the message says why, in words."""


class CannotConnect(HttpError):
    """The connection could not be made (refused, unknown host, TLS); `reason` in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TooLarge(HttpError):
    """The body passed `max_bytes` (after decompression); reading stopped there."""


class Answer(NamedTuple):
    """A whole answer: its status, Content-Type and (decompressed) body."""

    status: int
    content_type: str
    body: bytes


class ScrapeClient:
    """aiohttp reads for the fleet: keep-alive, at most `concurrency` at once, each within
    `timeout_s` in all (TimeoutError) and `max_bytes` of body (TooLarge); plain text asked,
    gzip read when sent anyway; redirects followed; userinfo sent as Basic auth."""

    def __init__(self, *, timeout_s: float, max_bytes: int, concurrency: int = 64) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._limit = asyncio.Semaphore(concurrency)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:  # made inside the running loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers={"User-Agent": "llmtop", "Accept-Encoding": "identity"},
                cookie_jar=aiohttp.DummyCookieJar(),
                max_field_size=1 << 16,
            )
        return self._session

    async def get(self, url: str) -> Answer:
        """The answer to GET `url`; raises TimeoutError, CannotConnect, TooLarge or HttpError."""
        accept = {"Accept": "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"}
        return await self._request("GET", url, headers=accept)

    async def post_form(self, url: str, fields: dict[str, str]) -> Answer:
        """The answer to POST `fields` form-encoded (a 307/308 keeps the POST); raises as `get`."""
        return await self._request("POST", url, data=fields)

    async def _request(self, method: str, url: str, **kwargs: Any) -> Answer:
        async with self._limit:
            try:
                async with self._open().request(method, url, max_redirects=5, **kwargs) as resp:
                    parts: list[bytes] = []
                    size = 0
                    async for chunk in resp.content.iter_any():
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise TooLarge(f"more than {self.max_bytes:,} bytes")
                        parts.append(chunk)
                    return Answer(resp.status, resp.content_type, b"".join(parts))
            except (TimeoutError, asyncio.TimeoutError):
                raise TimeoutError() from None
            except aiohttp.ClientError as e:
                raise _in_words(e, url) from None

    async def aclose(self) -> None:
        """Close the keep-alive connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _in_words(e: aiohttp.ClientError, url: str) -> HttpError:
    """aiohttp's error as ours, its words on one line."""
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        return CannotConnect(f"TLS: {getattr(e.certificate_error, 'reason', None) or e}")
    if isinstance(e, aiohttp.ClientConnectorSSLError):
        return CannotConnect(f"TLS: {e.os_error}")
    if isinstance(e, aiohttp.ClientConnectorError):
        os_error = e.os_error
        if isinstance(os_error, ConnectionRefusedError) or "refused" in str(os_error).lower():
            return CannotConnect("connection refused")
        return CannotConnect(os_error.strerror or str(os_error) or type(os_error).__name__)
    if isinstance(e, aiohttp.InvalidUrlClientError | aiohttp.NonHttpUrlClientError):
        return HttpError(f"not an http(s) URL: {url!r}")
    if isinstance(e, aiohttp.TooManyRedirects):
        return HttpError("more than 5 redirects")
    if isinstance(e, aiohttp.ClientPayloadError):
        if "decompress" in str(e).lower() or "encoding" in str(e).lower():
            return HttpError(f"a compressed body that does not inflate ({_one_line(str(e))})")
        return HttpError("the connection closed before the answer was complete")
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return HttpError("the connection closed before the answer was complete")
    if isinstance(e, aiohttp.ClientResponseError):  # what aiohttp's parser could not read
        return HttpError(f"not an HTTP answer llmtop reads ({_one_line(e.message)})")
    return HttpError(f"{type(e).__name__}: {_one_line(str(e))}" if str(e) else type(e).__name__)


def _one_line(text: str) -> str:
    return " ".join(text.split())
