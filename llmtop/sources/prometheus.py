"""Read every vLLM replica through a Prometheus-compatible HTTP API (/api/v1/query).

Prometheus, Thanos, Mimir and VictoriaMetrics all answer POST /api/v1/query with the same JSON.
Each poll asks three queries (gauges, rates, quantiles; a fourth when a data-parallel server is
seen) built in `core.promql`, whatever the fleet's size; the first bucket bounds are asked once.
Never raises: when the server cannot answer, the fleet shows one down row naming it and why.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from llmtop.core import promql
from llmtop.core.fleet import DerivedReplica
from llmtop.core.snapshot import EngineStats
from llmtop.errors import TargetError
from llmtop.sources.vllm import describe_error


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
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.queries = promql.Queries(promql.selector_matchers(selector), window_s, replica_label)
        self.timeout_s = timeout_s
        self.queries_sent = 0
        self._bounds: dict[str, float] | None = None
        self._client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeout_s))

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """One instant query's result vector; TargetError in the user's words otherwise."""
        endpoint = self.url + "/api/v1/query"
        self.queries_sent += 1
        try:
            resp = await self._client.post(endpoint, data={"query": expr})
            body = resp.json()
        except ValueError:
            raise TargetError(
                f"{endpoint} did not answer with JSON (not a Prometheus API?)"
            ) from None
        except Exception as e:
            raise TargetError(describe_error(endpoint, e, self.timeout_s)) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise TargetError(f"{endpoint}: HTTP {resp.status_code}: {error or 'query failed'}")
        result = body.get("data", {}).get("result", [])
        return [r for r in result if isinstance(r, dict)] if isinstance(result, list) else []

    async def read(self) -> list[DerivedReplica]:
        """Every replica's stats now; one down row for the server itself when it fails."""
        q = self.queries
        try:
            if not self._bounds:
                self._bounds = promql.first_bounds(await self.query(q.bucket_bounds()))
            answers = list(
                await asyncio.gather(
                    self.query(q.gauges()), self.query(q.rates()), self.query(q.quantiles())
                )
            )
            rows = promql.read_answers(answers, q.replica_label)
            if promql.data_parallel(rows):
                answers.append(await self.query(promql.server_figures(q)))
                rows = promql.read_answers(answers, q.replica_label)
        except TargetError as e:
            down = EngineStats(url=self.url, up=False, error=str(e))
            return [DerivedReplica(self.url, "prometheus", down)]
        return promql.replicas(rows, self._bounds)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
