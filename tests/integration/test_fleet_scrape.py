"""The fleet's aiohttp scraper against real sockets: every target problem is an error field."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from llmtop.sources.scrape import FleetScraper

LOAD = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_bytes()
ANSWERS = {
    b"/ok/metrics": (b"200 OK", b"text/plain", LOAD),
    b"/html/metrics": (b"200 OK", b"text/html", b"<!DOCTYPE html><html></html>"),
    b"/big/metrics": (b"200 OK", b"text/plain", LOAD * 4),
    b"/bad/metrics": (b"200 OK", b"text/plain", b'{"error": "not metrics"}\n'),
    b"/gone/metrics": (b"404 Not Found", b"text/plain", b"no\n"),
}


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path == b"/slow/metrics":
                    await asyncio.sleep(5)
                status, ctype, body = ANSWERS[path]
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\ncontent-type: "
                    + ctype
                    + b"\r\ncontent-length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, KeyError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.close()
        await srv.wait_closed()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_each_problem_is_named_and_good_targets_still_read(server: str) -> None:
    scraper = FleetScraper(timeout_s=1.0, max_bytes=len(LOAD) * 2)
    try:
        urls = [f"{server}/{p}" for p in ("ok", "html", "big", "bad", "gone", "slow")]
        urls.append(f"http://127.0.0.1:{closed_port()}")
        ok, html, big, bad, gone, slow, refused = await scraper.scrape_all(urls)
    finally:
        await scraper.aclose()
    assert ok.samples
    assert ok.error is None
    for raw in (html, big, bad, gone, slow, refused):
        assert raw.samples is None
        assert raw.error
        assert "\n" not in raw.error
        assert "Traceback" not in raw.error
    assert "HTML page" in (html.error or "")
    assert "stopped reading" in (big.error or "")
    assert "line 1" in (bad.error or "")
    assert "HTTP 404" in (gone.error or "")
    assert "no answer from" in (slow.error or "")
    assert "cannot connect" in (refused.error or "")
