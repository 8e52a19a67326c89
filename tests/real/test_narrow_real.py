"""A real vLLM answers llmtop's narrow scrape at /metrics/ (prometheus_client's mount), and the
narrow answer holds every series llmtop reads from the full /metrics, in about a third of the
bytes; its plain /metrics ignores the query, which the probe sees and passes over."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from llmtop.core.exposition import promtext
from llmtop.sources.direct import FleetScraper
from llmtop.sources.vllm import VLLM_KEEP

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(120)]


async def test_real_vllm_is_scraped_narrow_with_the_same_series(vllm_url: str) -> None:
    scraper = FleetScraper(timeout_s=10.0, max_bytes=1 << 22)
    try:
        first = await scraper.scrape(vllm_url)
        assert first.error is None
        assert first.samples
        narrow_url = scraper.narrow_url(vllm_url)
        assert narrow_url is not None
        assert urlsplit(narrow_url).path == "/metrics/"
        again = await scraper.scrape(vllm_url)
        assert again.error is None
        assert again.samples is not None
        async with httpx.AsyncClient(timeout=10.0) as client:
            full = (await client.get(f"{vllm_url}/metrics")).text
            ignored = (await client.get(f"{vllm_url}/metrics?{urlsplit(narrow_url).query}")).text
            narrowed = (await client.get(narrow_url)).text
        kept = promtext.parse(full, VLLM_KEEP)
        assert {(s.name, s.labels) for s in again.samples} == {(s.name, s.labels) for s in kept}
        assert len(ignored) > len(narrowed) * 2  # /metrics ignores the query; the mount does not
        assert len(narrowed) < len(full) / 2
    finally:
        await scraper.aclose()
