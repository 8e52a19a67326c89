"""Scrape one vLLM /metrics over httpx: bounded in time and size, errors in the user's words.

Never raises for a target problem: a refused connection, a timeout, an HTTP error, an HTML page,
a body over `max_bytes` or malformed text each become `RawEngine.error` with samples None.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx

from llmtop.core.base.raw import RawEngine
from llmtop.core.dialects.catalog import BY_KIND, detect, dialect_of, metrics_path, sample_names
from llmtop.core.exposition import promtext
from llmtop.errors import ScrapeError

VLLM_KEEP = promtext.keep_names(sample_names())


PROMETHEUS_PATH = BY_KIND["trtllm"].metrics_path
"""Where trtllm-serve serves its Prometheus text (/prometheus/metrics): its /metrics is a JSON
list of iteration stats (`Dialect.metrics_path`)."""
_PATHS: dict[str, str] = {}
"""Base URL -> the metrics path it was found to answer at, where not /metrics (trtllm-serve's);
bounded (`_PATHS_MAX`), so the next poll asks there at once."""
_PATHS_MAX = 1024


def metrics_url(url: str) -> str:
    """The /metrics URL of an engine given its base URL (or its /metrics URL); trtllm-serve's
    /prometheus/metrics where an earlier scrape found it there."""
    u = url.rstrip("/")
    return u if u.endswith("/metrics") else u + _PATHS.get(u, "/metrics")


def base_url(url: str) -> str:
    """The base URL of an engine given either form (/metrics or /prometheus/metrics)."""
    u = url.rstrip("/")
    return u.removesuffix(PROMETHEUS_PATH).removesuffix("/metrics")


class MetricsOff(ScrapeError):
    """/metrics answered 404 or 501: an engine running with its metrics off (llama-server
    without --metrics answers 501, SGLang without --enable-metrics 404), or not an engine."""


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
        if resp.status_code in (404, 501):
            raise MetricsOff(f"HTTP {resp.status_code} from {url}", target=url)
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
    engine: str | None = None,
    kind: str | None = None,
) -> RawEngine:
    """One scrape of one engine, filtered to the families llmtop reads; never raises. On first
    contact (`ask_version`) its version, and its kind where its metrics cannot tell (off, or no
    family llmtop reads), come from its info endpoint (`identify`); `engine`, `version`: what
    an earlier contact found. `kind` (`--engine-kind`) names the engine instead: no detection,
    its own info endpoint, and trtllm-serve read at /prometheus/metrics.

    trtllm-serve answers /metrics with JSON (its iteration stats): such an answer is read again
    at /prometheus/metrics, and that path kept for the URL. Its /version answers as vLLM's does,
    so a 404 at /metrics is retried there only where the kind is known to be TensorRT-LLM."""
    if kind is None:
        return await _scrape(client, url, timeout_s, max_bytes, version, ask_version, engine)
    engine = dialect_of(kind).kind
    if engine == "trtllm":
        _found_at(url, PROMETHEUS_PATH)
    raw = await _scrape(
        client, url, timeout_s, max_bytes, version, ask_version, engine, forced=True
    )
    return replace(raw, engine=engine, kind_forced=True)


async def _scrape(
    client: httpx.AsyncClient,
    url: str,
    timeout_s: float,
    max_bytes: int,
    version: str | None,
    ask_version: bool,
    engine: str | None,
    forced: bool = False,
) -> RawEngine:
    murl = metrics_url(url)
    try:
        try:
            text = await asyncio.wait_for(fetch_text(client, murl, max_bytes=max_bytes), timeout_s)
        except MetricsOff:
            if engine is None and ask_version:
                engine, version = await identify(client, url, timeout_s)
                ask_version = False
            if engine != "trtllm" or murl.endswith(PROMETHEUS_PATH):
                raise
            text = await _prometheus(client, url, max_bytes, timeout_s)
        if not murl.endswith(PROMETHEUS_PATH) and metrics_path(None, text):  # trtllm's JSON
            engine = engine or "trtllm"
            text = await _prometheus(client, url, max_bytes, timeout_s)
        try:
            samples = promtext.parse(text, VLLM_KEEP)
        except ScrapeError as e:
            murl = metrics_url(url)
            return RawEngine(url, None, error=f"{murl}: {e}", version=version, engine=engine)
    except MetricsOff as e:  # an engine that answers, with its metrics off, is no dead one
        if ask_version:
            found, version = await identify(client, url, timeout_s)
            engine = engine or found
        if engine is None:
            return RawEngine(url=url, samples=None, error=str(e))
        return RawEngine(url=url, samples=(), version=version, engine=engine)
    except Exception as e:  # every target problem becomes the error field
        error = describe_error(metrics_url(url), e, timeout_s)
        return RawEngine(url=url, samples=None, error=error, version=version, engine=engine)
    if ask_version:
        named = BY_KIND.get(engine or "") if forced or engine == "trtllm" else None
        spoken = named or detect([s.name for s in samples]).dialect
        if spoken is None:
            engine, version = await identify(client, url, timeout_s)
        else:
            engine, version = spoken.kind, await _version(client, url, spoken.info_path, timeout_s)
    return RawEngine(url=url, samples=samples, version=version, engine=engine)


def _found_at(url: str, path: str) -> None:
    u = url.rstrip("/")
    if not u.endswith("/metrics") and _PATHS.get(u) != path:
        if len(_PATHS) >= _PATHS_MAX:
            _PATHS.clear()
        _PATHS[u] = path


async def _prometheus(client: httpx.AsyncClient, url: str, max_bytes: int, timeout_s: float) -> str:
    """trtllm-serve's Prometheus text, its path kept for the URL once it answers."""
    purl = base_url(url) + PROMETHEUS_PATH
    text = await asyncio.wait_for(fetch_text(client, purl, max_bytes=max_bytes), timeout_s)
    _found_at(url, PROMETHEUS_PATH)
    return text


IDENTITIES = (
    ("/props", "llamacpp", "build_info"),
    ("/get_server_info", "sglang", "version"),
    ("/info", "tgi", "model_id"),
    ("/version", "vllm", "version"),
)
"""(info endpoint, the engine answering it, a key only its answer has), most specific first:
several engines answer /version, only llama.cpp /props."""


async def identify(
    client: httpx.AsyncClient, url: str, timeout_s: float
) -> tuple[str | None, str | None]:
    """(kind, version) from the first info endpoint that answers as its engine's; (None, None)
    when none does."""
    for path, kind, key in IDENTITIES:
        data = await _info(client, url, path, timeout_s)
        if data is not None and key in data:
            return kind, _version_in(data)
    return None, None


async def _version(client: httpx.AsyncClient, url: str, path: str, timeout_s: float) -> str | None:
    """The engine's version from its info endpoint, or None (older servers, errors)."""
    data = await _info(client, url, path, timeout_s)
    return None if data is None else _version_in(data)


async def _info(
    client: httpx.AsyncClient, url: str, path: str, timeout_s: float
) -> dict[str, object] | None:
    try:
        resp = await asyncio.wait_for(client.get(base_url(url) + path), timeout_s)
        data = resp.json() if resp.status_code == 200 else None
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def _version_in(data: dict[str, object]) -> str | None:
    v = data.get("version") or data.get("build_info")
    return v if isinstance(v, str) else None
