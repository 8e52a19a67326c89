"""GET /metrics: the gateway's state as Prometheus text, llmtop_gateway_* names.

A collector reads the admission controller at scrape time, so the request hot path never
touches prometheus_client; each app has its own registry (tests run many gateways at once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from llmtop.core.base.admin_api import LIMITS
from llmtop.gateway.admission.window import CumulativeHistogram
from llmtop.gateway.server.context import GatewayContext

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _hist(name: str, doc: str, h: CumulativeHistogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        name, doc, buckets=[(le, float(c)) for le, c in h.cumulative()], sum_value=h.sum
    )


class GatewayCollector(Collector):
    """Exports one gateway's counters, gauges, limits and histograms."""

    def __init__(self, state: GatewayContext, statuses: Counter[int] | None = None) -> None:
        self.state = state
        self.statuses = statuses
        """The proxy's answers by status (Proxy.statuses), when it has one."""

    def collect(self) -> Iterator[Metric]:
        ctl = self.state.admission
        lim = ctl.limits
        p = "llmtop_gateway_"
        yield GaugeMetricFamily(p + "in_flight", "Requests at the upstream now.", ctl.in_flight)
        queued = GaugeMetricFamily(
            p + "queued", "Requests waiting in the gateway now.", labels=["priority"]
        )
        for prio, n in ctl.queued_by_priority().items():
            queued.add_metric([prio], n)
        yield queued
        yield GaugeMetricFamily(
            p + "in_flight_prompt_tokens",
            "Summed prompt tokens of the requests in flight (estimated for text).",
            ctl.in_flight_prompt_tokens,
        )
        yield CounterMetricFamily(
            p + "requests_offered", "Generation requests that reached admission.", ctl.offered
        )
        outcomes = CounterMetricFamily(
            p + "requests", "Generation requests by final outcome.", labels=["outcome"]
        )
        for outcome, n in ctl.outcomes.items():
            outcomes.add_metric([outcome], n)
        yield outcomes
        if self.statuses is not None:
            answers = CounterMetricFamily(
                p + "responses",
                "Proxied requests by the status answered (0: the client left first).",
                labels=["status"],
            )
            for code, count in sorted(self.statuses.items()):
                answers.add_metric([str(code)], count)
            yield answers
        rejections = CounterMetricFamily(
            p + "rejections",
            "429 rejections by reason (queue_timeout: see timed_out).",
            labels=["reason"],
        )
        for reason, n in ctl.rejections.items():
            rejections.add_metric([reason], n)
        yield rejections
        upstream = CounterMetricFamily(
            p + "upstream_errors",
            "Upstream failures by reason (engine_queue_full/engine_token_backlog: vLLM's own "
            "503 refusals; engine_error, unreachable, timeout, ...) and upstream status.",
            labels=["reason", "status"],
        )
        for (reason, status), n in sorted(self.state.upstream_errors.counts.items()):
            upstream.add_metric([reason, status], n)
        yield upstream
        now = self.state.clock()
        waiting = self.state.unanswered
        yield GaugeMetricFamily(
            p + "oldest_queued_seconds",
            "Age of the oldest request waiting in the gateway now (0 when none).",
            waiting.oldest_queued_s(now) or 0.0,
        )
        yield GaugeMetricFamily(
            p + "oldest_unanswered_seconds",
            "Age (since arrival) of the oldest request at the engine still without a first "
            "byte (0 when none): a stuck request shows here before any TTFT histogram.",
            waiting.oldest_admitted_s(now) or 0.0,
        )
        yield _hist(
            p + "queue_wait_seconds", "Time requests waited in the queue.", ctl.queue_wait_hist
        )
        yield _hist(
            p + "ttft_seconds",
            "Time from arrival at the gateway to the first upstream byte.",
            ctl.ttft_hist,
        )
        yield _hist(
            p + "handler_seconds",
            "The request handler's own time per proxied request answered in full (request path, "
            "response headers, relaying the chunks); queue and upstream waits excluded.",
            self.state.handler_time.hist,
        )
        yield CounterMetricFamily(
            p + "priority_clamped",
            "Requests that claimed a priority above their API key's highest (run at it).",
            self.state.callers.clamped,
        )
        yield GaugeMetricFamily(p + "paused", "1 while admission is paused.", int(ctl.paused))
        healthy = self.state.upstream.healthy
        if healthy is not None:
            yield GaugeMetricFamily(
                p + "upstream_healthy", "1 when the upstream last answered.", int(healthy)
            )
        for spec in LIMITS:  # the one table; a limit that is off has no gauge
            value = getattr(lim, spec.field)
            if spec.kind != "choice" and value is not None:
                name = spec.field.removesuffix("_s") + ("_seconds" if spec.unit == "s" else "")
                yield GaugeMetricFamily(p + "limit_" + name, f"Limit: {spec.help}.", value)
        yield GaugeMetricFamily(
            p + "autopilot_auto",
            "1 in auto mode (the autopilot moves the KV budget).",
            int(lim.mode == "auto"),
        )
        yield GaugeMetricFamily(
            p + "in_flight_kv_blocks",
            "Predicted KV footprint in flight (blocks).",
            ctl.in_flight_kv_blocks,
        )
        yield from self._scaleout()

    def _scaleout(self) -> Iterator[Metric]:
        """The replicas (in flight, healthy, requests sent) and the shared limits' state."""
        p = "llmtop_gateway_"
        labels = ["replica"]
        in_flight = GaugeMetricFamily(
            p + "replica_in_flight", "Requests at each replica now.", labels=labels
        )
        healthy = GaugeMetricFamily(
            p + "replica_healthy",
            "1 when the replica takes traffic, 0 while ejected or awaiting a probe.",
            labels=labels,
        )
        sent = CounterMetricFamily(
            p + "replica_sent", "Attempts sent to each replica.", labels=labels
        )
        for r in self.state.balancer.replicas:
            in_flight.add_metric([r.url], r.in_flight)
            healthy.add_metric([r.url], int(r.state == "ok"))
            sent.add_metric([r.url], r.sent)
        yield from (in_flight, healthy, sent)
        status = self.state.shared.status()
        if status["backend"] == "redis":
            yield GaugeMetricFamily(
                p + "shared_fallback",
                "1 while Redis is unreachable and this gateway holds its share of the limits.",
                int(status["status"] == "fallback"),
            )
            yield GaugeMetricFamily(
                p + "shared_live_gateways",
                "Gateways holding a live lease at the last sync.",
                status["live_gateways"],
            )
            draining = status.get("draining_gateways")
            if draining is not None:
                yield GaugeMetricFamily(
                    p + "shared_draining_gateways",
                    "Other gateways sharing the limits that were draining at the last sync.",
                    draining,
                )
            held = status.get("global_in_flight")
            if held is not None:
                yield GaugeMetricFamily(
                    p + "shared_global_in_flight",
                    "Slots held by all gateways together at the last sync.",
                    held,
                )
        share = self.state.admission.share_slots
        if share is not None:
            yield GaugeMetricFamily(
                p + "share_slots",
                "This gateway's cap from outside its limits (Redis grant, live replicas).",
                share,
            )


def metrics_endpoint(
    state: GatewayContext, statuses: Counter[int] | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """The /metrics handler over a fresh registry holding this gateway's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(state, statuses))

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE)

    return metrics
