"""Read every replica through a Prometheus-compatible API (POST /api/v1/query, aiohttp).

A poll asks two queries at once, one series a replica (`core.promql.promql`), the slow figures
(`Info`) every `promql.INFO_EVERY_S`; never raises: a server that cannot answer is one down row.
A fleet that mixes engines (the info says which replicas export SGLang's, llama.cpp's, ...
families) is asked one pair per engine, each in that engine's own names, over its replicas
alone; vLLM's pair takes the rest (the down and the silent as well).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from llmtop.core.base.raw import PromAnswers, PromRow
from llmtop.core.base.snapshot import DerivedReplica
from llmtop.core.dialects.catalog import KINDS
from llmtop.core.promql import promql, promql_answers
from llmtop.core.promql.promql_answers import Answer, Info
from llmtop.errors import TargetError
from llmtop.sources.http.scrape_client import CannotConnect, HttpError, ScrapeClient

VLLM = promql.VLLM_KIND

Fetch = Callable[[str, str], Awaitable[tuple[int, bytes]]]
"""POST one query to an endpoint: (HTTP status, body). Injected by tests."""

MAX_ANSWER_BYTES = 256 << 20
"""An answer larger than this is refused, not read: a selector matching far more than vLLM
(a few thousand replicas answer a few tens of MB)."""


class Unreachable(TargetError):
    """A Prometheus that cannot be connected to: any other query would fail the same way."""


async def ask_api(
    endpoint: str, send: Callable[[], Awaitable[tuple[int, bytes]]], timeout_s: float
) -> list[dict[str, Any]]:
    """One query's result (an instant vector, a range matrix): `send` POSTs it to `endpoint`
    and gets (HTTP status, body) within `timeout_s`; TargetError in the user's words otherwise
    (`Unreachable` when the connection fails). The live source's and the history's one path."""
    try:
        status, raw = await asyncio.wait_for(send(), timeout_s)
    except (TimeoutError, asyncio.TimeoutError):
        raise TargetError(f"no answer from {endpoint} within {timeout_s:.1f} s") from None
    except CannotConnect as e:
        raise Unreachable(f"cannot connect to {endpoint} ({e.reason})") from None
    except OSError as e:  # an injected fetch's own
        reason = "connection refused" if isinstance(e, ConnectionRefusedError) else str(e)
        raise Unreachable(f"cannot connect to {endpoint} ({reason})") from None
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
        self._dialects = {
            k: promql.Queries(self.queries.matchers, window_s, replica_label, k)
            for k in KINDS
            if k != promql.VLLM_KIND
        }
        self._kind_asks: dict[str, tuple[promql.Packed, promql.Packed]] = {}
        """An engine other than vLLM -> its packed pair, over its replicas (fleets that mix)."""
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
        self.queries_sent += 1
        endpoint = self.url + "/api/v1/query"
        return await ask_api(endpoint, partial(self._fetch, endpoint, expr), self.timeout_s)

    async def _read_info(self) -> Info:
        q = self.queries
        info = promql_answers.read_info(
            await self.query(q.info(tuple(self._dialects))), q.replica_label
        )
        before = self._info
        kinds = sorted(set(info.kinds.values()) & self._dialects.keys())
        if before is None or (info.reasons, info.kinds) != (before.reasons, before.kinds):
            if kinds:
                others = " or ".join(self._dialects[k].carrier() for k in kinds)
                # the others' replicas, but for those that export vLLM's too (read as vLLM)
                rest = f"unless on ({q.replica_label}) (({others}) unless {q.carrier()})"
                self._asks = (q.replicas(info.reasons, rest), q.engines(info.reasons))
            else:
                self._asks = (q.replicas(info.reasons), q.engines(info.reasons))
            self._kind_asks = {}
            r = q.replica_label
            for k in kinds:
                d = self._dialects[k]
                among = f"and on ({r}) {d.carrier()}"
                earlier = [x for x in KINDS[: KINDS.index(k)] if x == VLLM or x in kinds]
                if earlier:  # a replica of two engines' families is the first's (`_first`)
                    carriers = " or ".join(self._queries(x).carrier() for x in earlier)
                    among += f" unless on ({r}) ({carriers})"
                self._kind_asks[k] = d.replicas(d.reasons(info.reasons), among)
        self._info, self._info_at = info, self._clock()
        return info

    def _queries(self, kind: str) -> promql.Queries:
        return self.queries if kind == VLLM else self._dialects[kind]

    async def _answers(self) -> list[tuple[str, list[Answer]]]:
        """vLLM's pair and each other engine's, asked at the same time, by engine."""
        asks = {promql.VLLM_KIND: self._asks[0], **self._kind_asks}
        answers = await asyncio.gather(*(self._ask(a) for a in asks.values()))
        return list(zip(asks, answers, strict=True))

    def _rows(self, answers: list[tuple[str, list[Answer]]], info: Info) -> list[PromRow]:
        """Every replica's row, each engine's read with the reasons it was asked by."""
        label = self.queries.replica_label
        rows: list[PromRow] = []
        for kind, answer in answers:
            if kind == promql.VLLM_KIND:
                rows += promql_answers.read_rows(answer, info, label)
            else:
                reasons = self._dialects[kind].reasons(info.reasons)
                rows += promql_answers.read_rows(answer, info, label, reasons=reasons, kind=kind)
        return rows

    async def read_answers(self) -> PromAnswers:
        """What Prometheus says of every replica now, decoded (what a recording keeps); the
        error instead when it cannot answer."""
        label = self.queries.replica_label
        try:
            info = self._info
            if info is None or self._clock() - self._info_at >= promql.INFO_EVERY_S:
                info = await self._read_info()
            answers = await self._answers()
            rows = self._rows(answers, info)
            if promql_answers.stale(info, rows, self._resets):
                before = info
                info = await self._read_info()
                if (info.reasons, info.kinds) != (before.reasons, before.kinds):
                    answers = await self._answers()
                rows = self._rows(answers, info)
            if not rows and promql_answers.unmatched_selector(info):
                raise TargetError(
                    f"{self.url}: the selector matches vLLM series but not their targets' up: "
                    "select by target labels (job, namespace, ...)"
                )
            self._resets = {r.replica: r.figures.get("resets") for r in rows}
            if promql_answers.data_parallel(rows):
                engines = await self._ask(self._asks[1])
                rows += promql_answers.read_rows(engines, info, label, by_engine=True)
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
