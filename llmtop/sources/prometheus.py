"""Read every vLLM replica through a Prometheus-compatible API (POST /api/v1/query, aiohttp).

A poll asks two queries at once, one series a replica (`core.promql.promql`), the slow figures
(`Info`) every `promql.INFO_EVERY_S`; never raises: a server that cannot answer is one down row.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from llmtop.core.base.raw import PromAnswers
from llmtop.core.base.snapshot import DerivedReplica
from llmtop.core.promql import promql, promql_answers
from llmtop.core.promql.promql_answers import Answer
from llmtop.errors import TargetError
from llmtop.sources.http.scrape_client import CannotConnect, HttpError, ScrapeClient

Fetch = Callable[[str, str], Awaitable[tuple[int, bytes]]]
"""POST one query to an endpoint: (HTTP status, body). Injected by tests."""

MAX_ANSWER_BYTES = 256 << 20
"""An answer larger than this is refused, not read: a selector matching far more than vLLM
(a few thousand replicas answer a few tens of MB)."""


class PrometheusSource:
    """Per-replica stats of every vLLM a Prometheus scrapes, matching `selector`."""

    def __init__(
        self,
        url: str,
        *,
        selector: str | None = None,
        window_s: float = 60.0,
        replica_label: str = "instance",
        timeout_s: float = 5.0,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.queries = promql.Queries(promql.selector_matchers(selector), window_s, replica_label)
        self.timeout_s = timeout_s
        self.queries_sent = 0
        self._clock = clock
        self._info: promql_answers.Info | None = None
        self._info_at = 0.0
        self._asks = (self.queries.replicas(), self.queries.engines())
        """The packed queries (replicas, engines) for the finished reasons `_info` knows."""
        self._resets: dict[str, float | None] = {}
        self._fetch = fetch or self._post
        self._http: ScrapeClient | None = None

    async def _post(self, endpoint: str, expr: str) -> tuple[int, bytes]:
        if self._http is None:  # made inside the running loop
            self._http = ScrapeClient(timeout_s=self.timeout_s, max_bytes=MAX_ANSWER_BYTES)
        answer = await self._http.post_form(endpoint, {"query": expr})
        return answer.status, answer.body

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """One instant query's result vector; TargetError in the user's words otherwise."""
        endpoint = self.url + "/api/v1/query"
        self.queries_sent += 1
        try:
            status, raw = await asyncio.wait_for(self._fetch(endpoint, expr), self.timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            raise TargetError(f"no answer from {endpoint} within {self.timeout_s:.1f} s") from None
        except CannotConnect as e:
            raise TargetError(f"cannot connect to {endpoint} ({e.reason})") from None
        except OSError as e:  # an injected fetch's own
            reason = "connection refused" if isinstance(e, ConnectionRefusedError) else str(e)
            raise TargetError(f"cannot connect to {endpoint} ({reason})") from None
        except HttpError as e:
            raise TargetError(f"{endpoint}: {e}") from None
        except Exception as e:
            detail = f": {e}" if str(e) else ""
            raise TargetError(f"{endpoint}: {type(e).__name__}{detail}") from None
        try:
            body = json.loads(raw)
        except ValueError:
            raise TargetError(
                f"{endpoint} did not answer with JSON (HTTP {status}; not a Prometheus API?)"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise TargetError(f"{endpoint}: HTTP {status}: {error or 'query failed'}")
        result = body.get("data", {}).get("result", [])
        return [r for r in result if isinstance(r, dict)] if isinstance(result, list) else []

    async def _read_info(self) -> promql_answers.Info:
        q = self.queries
        info = promql_answers.read_info(await self.query(q.info()), q.replica_label)
        if self._info is None or info.reasons != self._info.reasons:
            self._asks = (q.replicas(info.reasons), q.engines(info.reasons))
        self._info, self._info_at = info, self._clock()
        return info

    async def read_answers(self) -> PromAnswers:
        """What Prometheus says of every replica now, decoded (what a recording keeps); the
        error instead when it cannot answer."""
        label = self.queries.replica_label
        try:
            info = self._info
            if info is None or self._clock() - self._info_at >= promql.INFO_EVERY_S:
                info = await self._read_info()
            answers = await self._ask(self._asks[0])
            rows = promql_answers.read_rows(answers, info, label)
            if promql_answers.stale(info, rows, self._resets):
                reasons = info.reasons
                info = await self._read_info()
                if info.reasons != reasons:
                    answers = await self._ask(self._asks[0])
                rows = promql_answers.read_rows(answers, info, label)
            if not rows and promql_answers.unmatched_selector(info):
                raise TargetError(
                    f"{self.url}: the selector matches vLLM series but not their targets' up: "
                    "select by target labels (job, namespace, ...)"
                )
            self._resets = {r.replica: r.figures.get("resets") for r in rows}
            if promql_answers.data_parallel(rows):
                answers = await self._ask(self._asks[1])
                rows += promql_answers.read_rows(answers, info, label, by_engine=True)
        except TargetError as e:
            return PromAnswers(self.url, error=str(e))
        return PromAnswers(self.url, tuple(rows), dict(info.first_bounds))

    async def _ask(self, queries: tuple[promql.Packed, promql.Packed]) -> list[Answer]:
        """A pair of packed queries, at once (Prometheus evaluates each on one core)."""
        results = await asyncio.gather(*(self.query(q.expr) for q in queries))
        return [(q.names, result) for q, result in zip(queries, results, strict=True)]

    async def read(self) -> list[DerivedReplica]:
        """Every replica's stats now; one down row for the server itself when it fails."""
        return promql_answers.replicas(await self.read_answers())

    async def aclose(self) -> None:
        """Close the keep-alive connections."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
