"""The fleet's HTTP client (`scrape_client.ScrapeClient`, aiohttp) against real sockets: each way
an answer arrives, each way it fails, in one line of words (timeouts, size, TLS, auth, gzip)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import shutil
import socket
import ssl
import subprocess
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pytest

from llmtop.sources.http.scrape_client import CannotConnect, HttpError, ScrapeClient, TooLarge

BODY = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_bytes()

Handler = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
"""Answer one request head; False to close the connection afterwards."""


@dataclass
class Server:
    url: str
    heads: list[bytes] = field(default_factory=list)
    connections: int = 0
    in_flight: int = 0
    most_in_flight: int = 0


def reply(status: bytes, body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain\r\n" + extra
        + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> Server:
    server = Server(url="")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                server.heads.append(head)
                server.in_flight += 1
                server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    keep = await handler(head, reader, writer)
                finally:
                    server.in_flight -= 1
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_context)
    port = srv.sockets[0].getsockname()[1]
    server.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    SERVERS.append(srv)
    return server


SERVERS: list[asyncio.Server] = []


@pytest.fixture
async def client() -> AsyncIterator[ScrapeClient]:
    http = ScrapeClient(timeout_s=1.0, max_bytes=len(BODY) * 2)
    try:
        yield http
    finally:
        await http.aclose()
        for srv in SERVERS:
            srv.close()
        SERVERS.clear()


def path_of(head: bytes) -> bytes:
    return head.split(b" ", 2)[1]


async def test_keep_alive_reads_many_answers_over_one_connection(client: ScrapeClient) -> None:
    async def ok(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(reply(b"200 OK", BODY))
        return True

    server = await serve(ok)
    for _ in range(5):
        answer = await client.get(server.url + "/metrics")
        assert (answer.status, answer.body) == (200, BODY)
        assert answer.content_type == "text/plain"
    assert server.connections == 1
    head = server.heads[0].lower()
    assert head.startswith(b"get /metrics http/1.1\r\n")
    assert b"accept-encoding: identity" in head
    assert b"host: 127.0.0.1:" in head


async def test_chunked_close_delimited_and_compressed_bodies(client: ScrapeClient) -> None:
    async def varied(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        path = path_of(head)
        if path == b"/chunked":
            w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for i in range(0, len(BODY), 7000):
                piece = BODY[i : i + 7000]
                w.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                await w.drain()
            w.write(b"0\r\n\r\n")
            return True
        if path == b"/close":  # no length: the body ends with the connection
            w.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\n" + BODY)
            return False
        if path == b"/gzip":
            w.write(reply(b"200 OK", gzip.compress(BODY), b"content-encoding: gzip"))
            return True
        w.write(reply(b"200 OK", zlib.compress(BODY), b"content-encoding: deflate"))
        return True

    server = await serve(varied)
    for path in ("/chunked", "/close", "/gzip", "/deflate", "/chunked"):
        answer = await client.get(server.url + path)
        assert answer.body == BODY, path


async def test_redirects_are_followed_within_the_bound(client: ScrapeClient) -> None:
    async def target(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(reply(b"200 OK", b"there\n"))
        return True

    other = await serve(target)

    async def redirects(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        path = path_of(head)
        where = {
            b"/metrics": b"/metrics/",  # starlette's Mount
            b"/metrics/": other.url.encode() + b"/x",
            b"/loop": b"/loop",
        }[path]
        w.write(reply(b"307 Temporary Redirect", b"", b"location: " + where))
        return True

    server = await serve(redirects)
    answer = await client.get(server.url + "/metrics")
    assert (answer.status, answer.body) == (200, b"there\n")
    with pytest.raises(HttpError, match="more than 5 redirects"):
        await client.get(server.url + "/loop")


async def test_an_idle_connection_the_server_closed_is_replaced(client: ScrapeClient) -> None:
    """The server closes each connection right after its answer, without saying so: the next
    GET, written to the dead connection or finding it closed, still gets its answer."""

    async def once(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(reply(b"200 OK", BODY))
        return False

    server = await serve(once)
    for _ in range(3):
        assert (await client.get(server.url + "/metrics")).body == BODY
    assert server.connections == 3


async def test_failures_are_named(client: ScrapeClient) -> None:
    async def bad(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        path = path_of(head)
        if path == b"/slow":
            await asyncio.sleep(3)
        elif path == b"/big":
            w.write(reply(b"200 OK", BODY * 3))
        elif path == b"/bomb":  # small on the wire, too large inflated
            w.write(reply(b"200 OK", gzip.compress(BODY * 3), b"content-encoding: gzip"))
        elif path == b"/cut":
            w.write(reply(b"200 OK", BODY)[:-100])
            return False
        elif path == b"/brotli":
            w.write(reply(b"200 OK", b"xx", b"content-encoding: br"))
        else:
            w.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
            return False
        return True

    server = await serve(bad)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await client.get(server.url + "/slow")
    assert time.monotonic() - start < 2.0
    with pytest.raises(TooLarge):
        await client.get(server.url + "/big")
    with pytest.raises(TooLarge):
        await client.get(server.url + "/bomb")
    with pytest.raises(HttpError, match="closed before the answer was complete"):
        await client.get(server.url + "/cut")
    with pytest.raises(HttpError, match="brotli"):
        await client.get(server.url + "/brotli")
    with pytest.raises(HttpError, match="not an HTTP answer"):
        await client.get(server.url + "/ssh")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(CannotConnect, match="connection refused"):
        await client.get(f"http://127.0.0.1:{closed}/metrics")
    with pytest.raises(HttpError, match="not an http"):
        await client.get("ftp://127.0.0.1/metrics")


async def test_userinfo_is_sent_as_basic_auth(client: ScrapeClient) -> None:
    async def ok(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(reply(b"200 OK", b"ok\n"))
        return True

    server = await serve(ok)
    await client.get(server.url.replace("://", "://scraper:s%40cret@") + "/metrics")
    expected = b"authorization: basic " + base64.b64encode(b"scraper:s@cret").lower()
    assert expected in server.heads[-1].lower()


async def test_concurrency_is_bounded() -> None:
    async def slowish(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.05)
        w.write(reply(b"200 OK", b"ok\n"))
        return True

    server = await serve(slowish)
    http = ScrapeClient(timeout_s=5.0, max_bytes=1000, concurrency=3)
    try:
        answers = await asyncio.gather(*(http.get(server.url + f"/{i}") for i in range(12)))
    finally:
        await http.aclose()
        for srv in SERVERS:
            srv.close()
        SERVERS.clear()
    assert [a.status for a in answers] == [200] * 12
    assert server.most_in_flight == 3


def self_signed(tmp: Path) -> ssl.SSLContext | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_https_verifies_the_certificate(client: ScrapeClient, tmp_path: Path) -> None:
    """https is spoken, and a certificate nobody signed is refused in words."""
    context = self_signed(tmp_path)
    if context is None:
        pytest.skip("no openssl binary to make a certificate with")

    async def ok(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(reply(b"200 OK", b"ok\n"))
        return True

    server = await serve(ok, context)
    with pytest.raises(CannotConnect, match="TLS: CERTIFICATE_VERIFY_FAILED"):
        await client.get(server.url + "/metrics")


async def test_a_form_is_posted_and_a_307_keeps_it(client: ScrapeClient) -> None:
    """A Prometheus query: the form arrives whole; behind a 307 it is posted again, behind a
    303 the redirect is read with GET."""

    async def api(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        length = next(
            (
                int(x.split(b":")[1])
                for x in head.split(b"\r\n")
                if x.lower().startswith(b"content-length:")
            ),
            0,
        )
        form = await r.readexactly(length)
        path = path_of(head)
        if path == b"/moved":
            w.write(reply(b"307 Temporary Redirect", b"", b"location: /api/v1/query"))
        elif path == b"/see":
            w.write(reply(b"303 See Other", b"", b"location: /api/v1/query"))
        else:
            w.write(reply(b"200 OK", head.split(b" ", 1)[0] + b" " + form))
        return True

    server = await serve(api)
    query = 'sum by (instance) (rate(vllm:generation_tokens_total{job="vllm"}[1m]))'
    expected = b"POST query=" + urlencode({"query": query}).encode()[len("query=") :]
    for path in ("/api/v1/query", "/moved"):
        answer = await client.post_form(server.url + path, {"query": query})
        assert (answer.status, answer.body) == (200, expected)
    assert b"content-type: application/x-www-form-urlencoded" in server.heads[0].lower()
    answer = await client.post_form(server.url + "/see", {"query": query})
    assert answer.body == b"GET "
    assert server.connections == 1


def test_it_runs_on_uvloop_too() -> None:
    """uvloop (installed with uvicorn[standard]) hands the protocol a transport that is not an
    asyncio.Transport: the client must not care."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed on this platform")

    async def scrape() -> tuple[int, bytes]:
        async def ok(head: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
            w.write(reply(b"200 OK", BODY))
            return True

        server = await serve(ok)
        http = ScrapeClient(timeout_s=2.0, max_bytes=len(BODY) * 2)
        try:
            answer = await http.get(server.url + "/metrics")
            again = await http.get(server.url + "/metrics")
        finally:
            await http.aclose()
            for srv in SERVERS:
                srv.close()
            SERVERS.clear()
        assert again.body == answer.body
        return answer.status, answer.body

    assert uvloop.run(scrape()) == (200, BODY)
