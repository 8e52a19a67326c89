"""Scrape many vLLM /metrics at once over keep-alive connections: the fleet's direct source.

Over `scrape_client.ScrapeClient` (aiohttp), bounded in number, time and size; never raises
(`RawEngine.error`).
A target a probe shows can narrow gets asked only for llmtop's series (`narrow=False`: never);
with `--engine-kind` every target is read in that dialect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from llmtop.core.base.raw import RawEngine, Sample
from llmtop.core.exposition import narrow as narrowing
from llmtop.core.exposition import promtext
from llmtop.errors import ScrapeError
from llmtop.sources.http.scrape_client import CannotConnect, HttpError, ScrapeClient, TooLarge
from llmtop.sources.vllm import PROMETHEUS_PATH, VLLM_KEEP, base_url, metrics_url

_NAMES_QUERY = narrowing.query(VLLM_KEEP.names)


class FleetScraper:
    """Concurrent, bounded /metrics scrapes of many targets over keep-alive connections."""

    def __init__(
        self,
        *,
        timeout_s: float,
        max_bytes: int,
        narrow: bool = True,
        clock: Callable[[], float] = time.monotonic,
        http: ScrapeClient | None = None,
        kind: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.kind = kind
        """`--engine-kind`: every target read in this dialect (None: each as it speaks);
        trtllm-serve's at /prometheus/metrics."""
        self.max_bytes = max_bytes
        self._http = http or ScrapeClient(timeout_s=timeout_s, max_bytes=max_bytes)
        """The client (`kube.proxy`'s signs its requests to the API server's pod proxy)."""
        self._last: dict[str, tuple[bytes, tuple[Sample, ...]]] = {}
        """URL -> its last body and the samples parsed from it."""
        self._narrow: dict[str, narrowing.Narrowing] | None = {} if narrow else None
        """URL -> whether it is scraped narrow (None: every target in full)."""
        self._clock = clock

    def narrow_url(self, url: str) -> str | None:
        """The URL a target is scraped narrow at; None when it is scraped in full."""
        state = self._narrow.get(url) if self._narrow is not None else None
        return None if state is None else state.use(self._clock())

    async def scrape_all(self, urls: Sequence[str]) -> tuple[RawEngine, ...]:
        """One scrape of each URL, all at once (at most ScrapeClient's concurrency in flight)."""
        gone = self._last.keys() - set(urls)
        for url in gone:
            del self._last[url]  # a target that left: forget its last body
        if self._narrow is not None:
            for url in self._narrow.keys() - set(urls):
                del self._narrow[url]
        return tuple(await asyncio.gather(*(self.scrape(u) for u in urls)))

    async def scrape(self, url: str) -> RawEngine:
        """One scrape, filtered to the families llmtop reads; never raises."""
        murl = metrics_url(url)
        if self.kind == "trtllm" and not url.rstrip("/").endswith("/metrics"):
            murl = base_url(url) + PROMETHEUS_PATH
        try:
            samples = await self._read(url, murl)
        except ScrapeError as e:
            return RawEngine(url=url, samples=None, error=f"{murl}: {e}")
        except (TimeoutError, asyncio.TimeoutError):
            return RawEngine(
                url, None, error=f"no answer from {murl} within {self.timeout_s:.1f} s"
            )
        except CannotConnect as e:
            return RawEngine(url, None, error=f"cannot connect to {murl} ({e.reason})")
        except TooLarge:
            return RawEngine(
                url, None, error=f"{murl} sent more than {self.max_bytes:,} bytes; stopped reading"
            )
        except HttpError as e:
            return RawEngine(url, None, error=f"{murl}: {e}")
        except Exception as e:  # every target problem becomes the error field
            detail = f": {e}" if str(e) else ""
            return RawEngine(url, None, error=f"{murl}: {type(e).__name__}{detail}")
        if self.kind is not None:
            return RawEngine(url=url, samples=samples, engine=self.kind, kind_forced=True)
        return RawEngine(url=url, samples=samples)

    async def _read(self, url: str, murl: str) -> tuple[Sample, ...]:
        """The target's kept samples: narrow where it narrows, else in full (then a probe
        when one is due)."""
        state = None
        if self._narrow is not None:
            state = self._narrow.get(url)
            if state is None:
                state = self._narrow[url] = narrowing.Narrowing()
            narrow = state.use(self._clock())
            if narrow is not None:
                try:
                    return self._parse(url, await self._fetch(narrow))
                except CannotConnect:
                    raise  # the target is down, not its narrow answer: no second try
                except (ScrapeError, HttpError):
                    state.failed(self._clock())  # read in full below, the same poll
        body = await self._fetch(murl)
        samples = self._parse(url, body)
        if state is not None and state.due(self._clock()):
            try:
                found = await asyncio.wait_for(self._probe(murl, body, samples), self.timeout_s)
            except (TimeoutError, asyncio.TimeoutError):
                found = None
            state.found(found, self._clock())
        return samples

    async def _probe(self, murl: str, body: bytes, samples: tuple[Sample, ...]) -> str | None:
        """The first narrow URL whose answer is clearly smaller than `body` and holds the same
        kept series as `samples`; None when no candidate does."""
        for candidate in narrowing.candidates(murl, _NAMES_QUERY):
            try:
                narrow = await self._fetch(candidate)
                if not narrowing.worth(len(body), len(narrow)):
                    continue  # the query ignored (vLLM's plain /metrics): nothing to gain
                got = promtext.parse(narrow.decode("utf-8", errors="replace"), VLLM_KEEP)
            except (ScrapeError, HttpError):
                continue
            if narrowing.same_series(samples, got):
                return candidate
        return None

    def _parse(self, url: str, body: bytes) -> tuple[Sample, ...]:
        """The body's kept samples; a body byte for byte the target's last (an idle replica)
        is not parsed again."""
        last = self._last.get(url)
        if last is not None and last[0] == body:
            return last[1]
        self._last.pop(url, None)
        samples = promtext.parse(body.decode("utf-8", errors="replace"), VLLM_KEEP)
        self._last[url] = (body, samples)
        return samples

    async def _fetch(self, murl: str) -> bytes:
        answer = await self._http.get(murl)
        if answer.status != 200:
            raise ScrapeError(f"HTTP {answer.status} from {murl}")
        if "html" in answer.content_type.lower():
            raise ScrapeError(
                f"{murl} answered with an HTML page, not Prometheus metrics (wrong port?)"
            )
        return answer.body

    async def aclose(self) -> None:
        """Close the keep-alive connections."""
        await self._http.aclose()
