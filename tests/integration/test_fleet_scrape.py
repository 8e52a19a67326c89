"""The fleet's aiohttp scraper against real sockets: every target problem is an error field."""

from __future__ import annotations

import asyncio
import gc
import gzip
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.direct import FleetScraper
from llmtop.sources.fleet_collector import FleetCollector

LOAD = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_bytes()
ANSWERS = {
    b"/ok/metrics": (b"200 OK", b"text/plain", LOAD),
    b"/html/metrics": (b"200 OK", b"text/html", b"<!DOCTYPE html><html></html>"),
    b"/big/metrics": (b"200 OK", b"text/plain", LOAD * 4),
    b"/bad/metrics": (b"200 OK", b"text/plain", b'{"error": "not metrics"}\n'),
    b"/gone/metrics": (b"404 Not Found", b"text/plain", b"no\n"),
}
HEADS: list[bytes] = []
"""The request heads the server saw, newest last."""


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                HEADS.append(head)
                path = head.split(b" ", 2)[1]
                if path == b"/slow/metrics":
                    await asyncio.sleep(5)
                zipped = path == b"/zipped/metrics"  # compresses whatever was asked
                status, ctype, body = ANSWERS[b"/ok/metrics" if zipped else path]
                if zipped:
                    body = gzip.compress(body)
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\ncontent-type: "
                    + ctype
                    + (b"\r\ncontent-encoding: gzip" if zipped else b"")
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


async def test_scrapes_ask_for_plain_text_and_still_read_gzip(server: str) -> None:
    """No gzip asked (compressing costs the engine, inflating costs us); a server that
    compresses anyway is read all the same."""
    scraper = FleetScraper(timeout_s=1.0, max_bytes=len(LOAD) * 2)
    try:
        ok, zipped = await scraper.scrape_all([f"{server}/ok", f"{server}/zipped"])
    finally:
        await scraper.aclose()
    assert b"accept-encoding: identity" in HEADS[-1].lower()
    assert ok.samples
    assert zipped.samples == ok.samples


async def test_an_unchanged_body_is_not_parsed_again(server: str) -> None:
    """An idle replica's body, byte for byte the same: its samples are the same object; the
    samples of a target that left the list are forgotten."""
    scraper = FleetScraper(timeout_s=1.0, max_bytes=len(LOAD) * 2)
    try:
        (first,) = await scraper.scrape_all([f"{server}/ok"])
        (again,) = await scraper.scrape_all([f"{server}/ok"])
        await scraper.scrape_all([f"{server}/zipped"])
        (after,) = await scraper.scrape_all([f"{server}/ok"])
    finally:
        await scraper.aclose()
    assert first.samples is not None
    assert again.samples is first.samples
    assert after.samples == first.samples
    assert after.samples is not first.samples


async def test_a_fleet_collector_leaves_the_process_gc_alone() -> None:
    """A library object does not change process-wide settings: the GC threshold is the
    polling commands' (llmtop.cli.tune_gc, tests/unit/test_cli.py)."""
    before = gc.get_threshold()
    monitor = MonitorSettings(vllm_urls=("http://a", "http://b"), gateway_url=None, nvml=False)
    collector = FleetCollector(monitor, HealthSettings())
    assert gc.get_threshold() == before
    await collector.aclose()
    assert gc.get_threshold() == before
