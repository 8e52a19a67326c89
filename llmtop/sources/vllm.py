"""Scrape one vLLM /metrics over httpx: bounded in time and size, errors in the user's words.

Never raises for a target problem: a refused connection, a timeout, an HTTP error, an HTML page,
a body over `max_bytes` or malformed text each become `RawEngine.error` with samples None.
"""

from __future__ import annotations

import asyncio

import httpx

from llmtop.core.base.raw import RawEngine
from llmtop.core.exposition import promtext
from llmtop.core.dialects.catalog import sample_names
from llmtop.errors import ScrapeError

VLLM_KEEP = promtext.keep_names(sample_names())


def metrics_url(url: str) -> str:
    """The /metrics URL of an engine given its base URL (or its /metrics URL)."""
    u = url.rstrip("/")
    return u if u.endswith("/metrics") else u + "/metrics"


def base_url(url: str) -> str:
    """The base URL of an engine given either form."""
    u = url.rstrip("/")
    return u.removesuffix("/metrics")


class BodyTooLarge(Exception):
    """A response body over the configured limit (reading stopped there)."""


async def fetch_text(
    client: httpx.AsyncClient, url: str, *, max_bytes: int, what: str = "Prometheus metrics"
) -> str:
    """GET `url` and return its text, refusing HTML and bodies over `max_bytes`.

    Raises httpx errors, ScrapeError (HTTP status, HTML) and BodyTooLarge.
    """
    # identity: an exporter that gzips when asked (prometheus_client's make_asgi_app; not vLLM
    # 0.32's /metrics) spends more CPU on it than a body that crosses loopback or a LAN once a
    # second saves (BENCHMARKS.md, "Parsing a scrape and reading 100 replicas")
    async with client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as resp:
        if resp.status_code != 200:
            raise ScrapeError(f"HTTP {resp.status_code} from {url}", target=url)
        ctype = resp.headers.get("content-type", "")
        if "html" in ctype.lower():
            raise ScrapeError(
                f"{url} answered with an HTML page, not {what} (wrong port?)", target=url
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise BodyTooLarge(f"{url} sent more than {max_bytes:,} bytes; stopped reading")
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def describe_error(url: str, e: BaseException, timeout_s: float) -> str:
    """A one-line, user-facing reason a target could not be read."""
    if isinstance(e, TimeoutError | httpx.TimeoutException):
        return f"no answer from {url} within {timeout_s:.1f} s"
    if isinstance(e, httpx.ConnectError):
        reason = str(e) or "connection refused"
        if "refused" in reason.lower() or "all connection attempts failed" in reason.lower():
            reason = "connection refused"
        return f"cannot connect to {url} ({reason})"
    if isinstance(e, ScrapeError | BodyTooLarge):
        return str(e)
    if isinstance(e, httpx.HTTPError):
        return f"{url}: {type(e).__name__}: {e}" if str(e) else f"{url}: {type(e).__name__}"
    return f"{url}: {type(e).__name__}: {e}"


async def scrape_engine(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    version: str | None = None,
    ask_version: bool = True,
) -> RawEngine:
    """One scrape of one engine, filtered to the families llmtop reads; never raises."""
    murl = metrics_url(url)
    try:
        text = await asyncio.wait_for(fetch_text(client, murl, max_bytes=max_bytes), timeout_s)
        try:
            samples = promtext.parse(text, VLLM_KEEP)
        except ScrapeError as e:
            return RawEngine(url=url, samples=None, error=f"{murl}: {e}", version=version)
    except Exception as e:  # every target problem becomes the error field
        return RawEngine(url=url, samples=None, error=describe_error(murl, e, timeout_s))
    if version is None and ask_version:
        version = await _version(client, url, timeout_s)
    return RawEngine(url=url, samples=samples, version=version)


async def _version(client: httpx.AsyncClient, url: str, timeout_s: float) -> str | None:
    """vLLM's GET /version, or None (older servers, other engines, errors)."""
    try:
        resp = await asyncio.wait_for(client.get(base_url(url) + "/version"), timeout_s)
        data = resp.json() if resp.status_code == 200 else None
    except Exception:
        return None
    v = data.get("version") if isinstance(data, dict) else None
    return v if isinstance(v, str) else None
