"""Narrow scrapes over real sockets: found by a probe, never assumed; dropped when they fail.

A sim (which, as vLLM, answers /metrics/?name[]= with only the series named) and a server in
the test whose /metrics/ answer each test sets: filtered, ignored, an error, a series short.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from llmtop.cli import main
from llmtop.core.exposition import narrow, promtext
from llmtop.sim.exposition import restrict
from llmtop.sources.direct import FleetScraper
from llmtop.sources.vllm import VLLM_KEEP

LOAD = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_text()


@dataclass
class Exporter:
    """A /metrics server: /metrics the whole capture, /metrics/ as `mount` says."""

    url: str = ""
    mount: str = "filter"  # filter | ignore | error | short | missing
    paths: list[str] = field(default_factory=list)
    """The paths asked, oldest first (query left out)."""

    def answer(self, target: str) -> tuple[bytes, str]:
        parts = urlsplit(target)
        self.paths.append(parts.path)
        names = set(parse_qs(parts.query).get("name[]", []))
        if parts.path == "/metrics":
            return b"200 OK", LOAD
        if parts.path != "/metrics/" or self.mount == "missing":
            return b"404 Not Found", "not found\n"
        if self.mount == "error":
            return b"500 Internal Server Error", "boom\n"
        if self.mount == "ignore" or not names:
            return b"200 OK", LOAD
        if self.mount == "short":  # one kept series fewer than asked for
            names.discard("vllm:num_requests_waiting")
        return b"200 OK", restrict(LOAD, names)


@pytest.fixture
async def exporter() -> AsyncIterator[Exporter]:
    ex = Exporter()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                status, text = ex.answer(head.split(b" ", 2)[1].decode("latin-1"))
                body = text.encode()
                writer.write(
                    b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; version=0.0.4"
                    b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    ex.url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    try:
        yield ex
    finally:
        srv.close()
        await srv.wait_closed()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def series(samples: Any) -> set[tuple[str, Any]]:
    return {(s.name, s.labels) for s in samples}


FULL = promtext.parse(LOAD, VLLM_KEEP)


async def test_a_vllm_like_mount_is_found_and_read_narrow(exporter: Exporter) -> None:
    scraper = FleetScraper(timeout_s=2.0, max_bytes=1 << 20)
    try:
        first = await scraper.scrape(exporter.url)
        assert first.samples == FULL
        # the plain path ignores nothing here but sends it all: only the mount is smaller
        assert exporter.paths == ["/metrics", "/metrics", "/metrics/"]
        assert urlsplit(scraper.narrow_url(exporter.url) or "").path == "/metrics/"
        exporter.paths.clear()
        second = await scraper.scrape(exporter.url)
        assert exporter.paths == ["/metrics/"]
        assert second.error is None
        assert second.samples == FULL
    finally:
        await scraper.aclose()


@pytest.mark.parametrize("mount", ["ignore", "error", "short", "missing"])
async def test_an_exporter_that_cannot_narrow_is_scraped_in_full(
    exporter: Exporter, mount: str
) -> None:
    exporter.mount = mount
    clock = Clock()
    scraper = FleetScraper(timeout_s=2.0, max_bytes=1 << 20, clock=clock)
    try:
        assert (await scraper.scrape(exporter.url)).samples == FULL
        assert scraper.narrow_url(exporter.url) is None
        exporter.paths.clear()
        clock.now += narrow.REPROBE_S - 1
        assert (await scraper.scrape(exporter.url)).samples == FULL
        assert exporter.paths == ["/metrics"]  # no probe before REPROBE_S
        exporter.mount = "filter"  # the exporter upgraded: found at the next probe
        clock.now += 1
        await scraper.scrape(exporter.url)
        assert scraper.narrow_url(exporter.url) is not None
    finally:
        await scraper.aclose()


@pytest.fixture
async def narrowed(exporter: Exporter) -> AsyncIterator[tuple[FleetScraper, Clock]]:
    """A scraper on a fake clock that has found the exporter's narrow answer."""
    clock = Clock()
    scraper = FleetScraper(timeout_s=2.0, max_bytes=1 << 20, clock=clock)
    try:
        await scraper.scrape(exporter.url)
        assert scraper.narrow_url(exporter.url) is not None
        yield scraper, clock
    finally:
        await scraper.aclose()


async def test_a_narrow_answer_that_fails_falls_back_to_full_in_the_same_poll(
    exporter: Exporter, narrowed: tuple[FleetScraper, Clock]
) -> None:
    scraper, clock = narrowed
    exporter.mount = "error"
    exporter.paths.clear()
    got = await scraper.scrape(exporter.url)
    assert got.error is None
    assert got.samples == FULL  # nothing lost, no error shown
    assert exporter.paths == ["/metrics/", "/metrics"]
    assert scraper.narrow_url(exporter.url) is None
    exporter.paths.clear()
    clock.now += 1
    await scraper.scrape(exporter.url)
    assert exporter.paths == ["/metrics"]


async def test_a_narrowed_target_is_checked_again_and_dropped_when_short(
    exporter: Exporter, narrowed: tuple[FleetScraper, Clock]
) -> None:
    scraper, clock = narrowed
    exporter.mount = "short"  # now answers a series short: only a check can tell
    clock.now += narrow.REPROBE_S
    exporter.paths.clear()
    got = await scraper.scrape(exporter.url)
    assert got.samples == FULL
    assert exporter.paths == ["/metrics", "/metrics", "/metrics/"]
    assert scraper.narrow_url(exporter.url) is None


async def test_full_scrape_asks_for_nothing_else(exporter: Exporter) -> None:
    scraper = FleetScraper(timeout_s=2.0, max_bytes=1 << 20, narrow=False)
    try:
        for _ in range(2):
            assert (await scraper.scrape(exporter.url)).samples == FULL
        assert exporter.paths == ["/metrics", "/metrics"]
        assert scraper.narrow_url(exporter.url) is None
    finally:
        await scraper.aclose()


async def test_the_sim_narrows_as_vllm_and_reads_the_same_series(
    start_sim: Callable[..., Any],
) -> None:
    sim = start_sim(profile="fast")
    scraper = FleetScraper(timeout_s=5.0, max_bytes=1 << 22)
    try:
        await scraper.scrape(sim.url)
        narrow_url = scraper.narrow_url(sim.url)
        assert narrow_url is not None
        assert urlsplit(narrow_url).path == "/metrics/"
        got = await scraper.scrape(sim.url)
        async with httpx.AsyncClient() as client:
            full = (await client.get(f"{sim.url}/metrics")).text
            narrowed = (await client.get(narrow_url)).text
        assert got.samples is not None
        assert series(got.samples) == series(promtext.parse(full, VLLM_KEEP))
        assert len(narrowed) < len(full) / 2
    finally:
        await scraper.aclose()


@pytest.mark.parametrize("flags", [(), ("--full-scrape",)])
def test_snapshot_json_says_how_each_replica_was_scraped(
    start_sim: Callable[..., Any], capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]
) -> None:
    """`snapshot --json` of two sims: "scrape" is "narrow" (they answer /metrics/?name[]= as
    vLLM does), "full" with --full-scrape."""
    sims = [start_sim(profile="fast") for _ in range(2)]
    args = ["snapshot", "--window-s", "1.5", "--gateway", "off", "--json", *flags]
    for sim in sims:
        args += ["--vllm", sim.url]
    main(args)
    replicas = json.loads(capsys.readouterr().out)["fleet"]["replicas"]
    assert {r["key"] for r in replicas} == {sim.url for sim in sims}
    assert {r["scrape"] for r in replicas} == {"full" if flags else "narrow"}
