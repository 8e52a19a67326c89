"""IO: scrape one vLLM /metrics (and the gateway's /admin/stats) every `interval_s` over a
window; the pure modules read the `Point`s. A target that cannot be read at the first scrape is
a TargetError (one line); a later failed scrape is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx

from llmtop.core.exposition import promtext
from llmtop.errors import ScrapeError, TargetError
from llmtop.sources.gateway import GatewayReader
from llmtop.sources.http.clients import http_client
from llmtop.sources.vllm import describe_error, fetch_text, metrics_url
from llmtop.whatif.model.window import Point, point, sample_names

KEEP = promtext.keep_names(sample_names())
MAX_BYTES = 8 * 1024 * 1024


async def scrape_once(
    client: httpx.AsyncClient,
    vllm_url: str,
    gateway: GatewayReader | None,
    timeout_s: float,
) -> Point:
    """One scrape of the engine and the gateway; TargetError (one line) when either fails."""
    url = metrics_url(vllm_url)
    t = time.monotonic()
    try:
        text = await asyncio.wait_for(fetch_text(client, url, max_bytes=MAX_BYTES), timeout_s)
        samples = promtext.parse(text, KEEP)
    except ScrapeError as e:
        raise TargetError(f"{url}: {e}") from None
    except Exception as e:
        raise TargetError(describe_error(url, e, timeout_s)) from None
    stats: dict[str, Any] | None = None
    if gateway is not None:
        stats, error, _, _ = await gateway.read(client, timeout_s)
        if error is not None:
            raise TargetError(error)
    return point(t, samples, stats)


async def collect_window(
    vllm_url: str,
    gateway_url: str | None,
    *,
    window_s: float,
    interval_s: float = 1.0,
    token: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[Point]:
    """Scrape every `interval_s` for `window_s`; a scrape that fails after the first is skipped.
    `transport`: one that signs requests to a Kubernetes pod proxy (sources/kube/single.py)."""
    timeout_s = max(0.5, min(5.0, interval_s * 0.9))
    reader = GatewayReader(gateway_url, token, optional=False) if gateway_url else None
    points: list[Point] = []
    async with http_client(timeout_s, transport=transport) as client:
        start = time.monotonic()
        points.append(await scrape_once(client, vllm_url, reader, timeout_s))
        n = 1
        while True:
            due = start + n * interval_s
            if due - start > window_s + 1e-6:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            n += 1
            with contextlib.suppress(TargetError):
                points.append(await scrape_once(client, vllm_url, reader, timeout_s))
    return points
