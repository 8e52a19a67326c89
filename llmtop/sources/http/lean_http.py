"""A lean HTTP/1.1 client for reading many /metrics a second: asyncio.Protocol + httptools.

Buys 0.7 % of a core against aiohttp at 100 replicas (BENCHMARKS §15) by doing only what a scrape
needs: GET or form POST, keep-alive, redirects, http(s), Basic auth, a size bound, one deadline.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import zlib
from dataclasses import dataclass
from typing import cast
from urllib.parse import unquote, urlencode, urljoin, urlsplit

import httptools

MAX_REDIRECTS = 5
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
_IDLE_PER_ORIGIN = 2
_NO_BODY = frozenset((204, 304))


class HttpError(Exception):
    """A request that did not give an answer; the message says why, in words."""


class CannotConnect(HttpError):
    """The connection could not be made (refused, unknown host, TLS); `reason` in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TooLarge(HttpError):
    """The body passed `max_bytes` (after decompression); reading stopped there."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete response: status, the two headers a scrape looks at, the decoded body."""

    status: int
    content_type: str
    body: bytes
    location: str | None = None


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class _Request:
    """Where to connect and the request's bytes."""

    origin: _Origin
    head: bytes


def _request_of(url: str, form: bytes | None = None) -> _Request:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"not an http(s) URL: {url!r}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise HttpError(f"bad port in {url!r}") from None
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    if parts.port:
        shown += f":{parts.port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"{'GET' if form is None else 'POST'} {target} HTTP/1.1",
        f"Host: {shown}",
        "User-Agent: llmtop",
        "Accept: " + ("text/plain;version=0.0.4;q=0.9,*/*;q=0.1" if form is None else "*/*"),
        "Accept-Encoding: identity",
    ]
    if form is not None:
        lines.append("Content-Type: application/x-www-form-urlencoded")
        lines.append(f"Content-Length: {len(form)}")
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        lines.append("Authorization: Basic " + base64.b64encode(pair.encode()).decode("ascii"))
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="strict")
    return _Request(_Origin(scheme, host, port), head + (form or b""))


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time, answered through a Future."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = False
        """Whether an answer has come over this connection (then it may have gone stale)."""
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[Answer] | None = None
        self._got_bytes = False
        """Whether any byte came since the request was written (a stale connection sends none)."""
        self._reset()

    def _reset(self) -> None:
        self._headers: dict[bytes, bytes] = {}
        self._parts: list[bytes] = []
        self._size = 0
        self._inflate: zlib._Decompress | None = None
        self._headers_done = False

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a cast, not an isinstance check: uvloop's TCPTransport is not an asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._answer is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(HttpError(f"not an HTTP answer ({e})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._answer is None or self._answer.done():
            return
        if self._headers_done and self._delimited_by_close():
            self.on_message_complete()
        elif self.used and not self._got_bytes:
            self._fail(_Stale())
        else:
            self._fail(HttpError("the connection closed before the answer was complete"))

    # --- httptools callbacks
    def on_message_begin(self) -> None:
        self._reset()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    # Callbacks never raise (httptools would wrap the error): a problem fails the answer, and
    # the callbacks still to come for the bytes already fed find no answer and do nothing.
    def on_headers_complete(self) -> None:
        self._headers_done = True
        encoding = self._headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding in (b"gzip", b"x-gzip", b"deflate"):
            self._inflate = zlib.decompressobj(wbits=47)  # gzip or zlib, told by the header
        elif encoding != b"identity":
            name = encoding.decode("latin-1")
            self._fail(HttpError(f"a body in {name!r} encoding, which llmtop cannot read"))

    def on_body(self, body: bytes) -> None:
        if self._answer is None:
            return
        if self._inflate is not None:
            try:
                body = self._inflate.decompress(body, self.max_bytes + 1 - self._size)
            except zlib.error as e:
                self._fail(HttpError(f"a compressed body that does not inflate ({e})"))
                return
        self._size += len(body)
        if self._size > self.max_bytes:
            self._fail(TooLarge(f"more than {self.max_bytes:,} bytes"))
            return
        self._parts.append(body)

    def on_message_complete(self) -> None:
        answer, self._answer = self._answer, None
        if answer is None or answer.done():
            return
        self.used = True
        headers = self._headers
        location = headers.get(b"location")
        answer.set_result(
            Answer(
                status=self._parser.get_status_code(),
                content_type=headers.get(b"content-type", b"").decode("latin-1"),
                body=b"".join(self._parts),
                location=location.decode("latin-1") if location is not None else None,
            )
        )
        if not self._parser.should_keep_alive():
            self.close()

    # --- use
    def send(self, head: bytes, answer: asyncio.Future[Answer]) -> None:
        """Write the request; `answer` gets the response or the reason there is none."""
        assert self.transport is not None
        self._reset()
        self._got_bytes = False
        self._answer = answer
        self.transport.write(head)

    def expire(self) -> None:
        """The deadline passed: the answer in flight will not be read (the connection goes)."""
        self._fail(TimeoutError())

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: BaseException) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)
        self.close()

    def _delimited_by_close(self) -> bool:
        h = self._headers
        return (
            b"content-length" not in h
            and b"chunked" not in h.get(b"transfer-encoding", b"").lower()
            and self._parser.get_status_code() not in _NO_BODY
        )


class _Stale(HttpError):
    """A reused keep-alive connection closed before any byte of the answer: send again."""

    def __init__(self) -> None:
        super().__init__("the server closed an idle connection")


class LeanClient:
    """Requests over keep-alive connections kept per origin; at most `concurrency` at once."""

    def __init__(self, *, timeout_s: float, max_bytes: int, concurrency: int = 64) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._limit = asyncio.Semaphore(concurrency)
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None

    async def get(self, url: str) -> Answer:
        """The answer to GET `url` (redirects followed), within `timeout_s` in all.

        Raises TimeoutError, CannotConnect, TooLarge or HttpError.
        """
        return await self._request(url, None)

    async def post_form(self, url: str, fields: dict[str, str]) -> Answer:
        """The answer to POST `fields` form-encoded to `url` (a 307/308 keeps the POST; a
        301/302/303 is followed with GET, as browsers and aiohttp do)."""
        return await self._request(url, urlencode(fields).encode("ascii"))

    async def _request(self, url: str, form: bytes | None) -> Answer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        async with self._limit:
            for _ in range(MAX_REDIRECTS + 1):
                answer = await self._once(url, form, deadline)
                if answer.status not in _REDIRECTS or not answer.location:
                    return answer
                url = urljoin(url, answer.location)
                if answer.status not in (307, 308):
                    form = None
        raise HttpError(f"more than {MAX_REDIRECTS} redirects")

    async def _once(self, url: str, form: bytes | None, deadline: float) -> Answer:
        request = _request_of(url, form)
        try:
            return await self._send(request, deadline, reuse=True)
        except _Stale:
            return await self._send(request, deadline, reuse=False)

    async def _send(self, request: _Request, deadline: float, *, reuse: bool) -> Answer:
        loop = asyncio.get_running_loop()
        conn = self._take_idle(request.origin) if reuse else None
        if conn is None:
            conn = await self._connect(request.origin, deadline)
        answer: asyncio.Future[Answer] = loop.create_future()
        timer = loop.call_at(deadline, conn.expire)
        try:
            conn.send(request.head, answer)
            result = await answer
        except BaseException:
            conn.close()
            raise
        finally:
            timer.cancel()
        if not conn.closed:
            idle = self._idle.setdefault(request.origin, [])
            if len(idle) < _IDLE_PER_ORIGIN:
                idle.append(conn)
            else:
                conn.close()
        return result

    def _take_idle(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, origin: _Origin, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(self.max_bytes),
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                ),
                max(0.0, deadline - loop.time()),
            )
        except (TimeoutError, asyncio.TimeoutError):
            raise TimeoutError() from None
        except ssl.SSLError as e:
            raise CannotConnect(f"TLS: {e.reason or e}") from None
        except OSError as e:
            raise CannotConnect(_reason(e)) from None
        return conn

    def close(self) -> None:
        """Close every idle connection (those in flight close when their request ends)."""
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _reason(e: OSError) -> str:
    """An OSError from connecting, in words (asyncio joins several attempts' errors in one)."""
    text = str(e)
    if isinstance(e, ConnectionRefusedError) or "refused" in text.lower():
        return "connection refused"
    return e.strerror or text or type(e).__name__
