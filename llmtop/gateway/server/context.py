"""What the gateway's handlers share: settings, the admission controller, the upstream client
(owned by the app's lifespan) and the upstream's last known health."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp

from llmtop.asgi.drain import Drain
from llmtop.core.base.admin_api import SloDoc, StatsDoc
from llmtop.gateway.admission.callers import CallerRules
from llmtop.gateway.admission.controller import AdmissionController, Limits
from llmtop.gateway.admission.queueing import POLICIES
from llmtop.gateway.history.keeper import HistoryKeeper
from llmtop.gateway.server.handler_time import HandlerTime
from llmtop.gateway.server.unanswered import Unanswered
from llmtop.gateway.server.upstream_errors import UpstreamErrors
from llmtop.gateway.upstreams.balancer import Balancer
from llmtop.gateway.upstreams.shared import LocalLimits, SharedLimits
from llmtop.settings import GatewaySettings, SloSettings


@dataclass
class UpstreamHealth:
    """The upstream as the proxy and the health probe last saw it; None = not yet known."""

    url: str
    healthy: bool | None = None
    last_error: str | None = None

    def ok(self) -> None:
        self.healthy = True

    def failed(self, error: str) -> None:
        self.healthy = False
        self.last_error = error

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "healthy": self.healthy, "last_error": self.last_error}


def upstream_timeout(settings: GatewaySettings) -> aiohttp.ClientTimeout:
    """Connect within upstream_connect_timeout_s; then any silence over the read timeout fails.

    No total: a stream may run as long as tokens keep coming. The read clock starts once the
    request body is written (aiohttp's rule), so only an upstream that stops reading a body
    larger than the socket buffers could hold a slot past it, until the client leaves."""
    return aiohttp.ClientTimeout(
        total=None,
        connect=None,
        sock_connect=settings.upstream_connect_timeout_s,
        sock_read=settings.upstream_read_timeout_s,
    )


DEFAULT_UPSTREAM = "http://127.0.0.1:8000"


def upstream_urls(text: str) -> list[str]:
    """The upstreams of `--upstream` (repeated, or comma-separated), without trailing /; none
    for an empty one (a feed's first set may be empty: the caller picks the default)."""
    return [u.strip().rstrip("/") for u in text.split(",") if u.strip()]


def limits_of(settings: GatewaySettings) -> Limits:
    """The starting limits: admission's TTFT budget is the SLO ([slo] ttft_s; only the deadline
    policies use it); --autopilot (or mode auto) also means a deadline queue."""
    auto = settings.autopilot or settings.mode == "auto"
    policy = settings.queue_policy
    return Limits(
        max_concurrency=settings.max_concurrency,
        max_queue=settings.max_queue,
        queue_timeout_s=settings.queue_timeout_s,
        rate_limit_rpm=settings.rate_limit_rpm,
        max_inflight_prompt_tokens=settings.max_inflight_prompt_tokens,
        max_inflight_kv_blocks=settings.max_inflight_kv_blocks,
        max_unprefilled_prompt_tokens=settings.max_unprefilled_prompt_tokens,
        ttft_slo_s=settings.slo.ttft_s,
        queue_policy="deadline" if auto and settings.queue_policy == "fifo" else policy,
        mode="auto" if auto else settings.mode,
    )


def slo_stats(ctl: AdmissionController, slo: SloSettings) -> SloDoc:
    """/admin/stats' `slo`: the SLO this gateway read, the TTFT budget admission works to
    (the SLO unless changed live), what a request may wait queued (that budget less the
    engine's own TTFT, the margin; None when off or the policy keeps no deadlines) and the
    tenants' overrides, which are admission's only."""
    admit = ctl.limits.ttft_slo_s
    deadline = admit is not None and POLICIES[ctl.limits.queue_policy].budgets
    return {
        "ttft_s": slo.ttft_s,
        "itl_s": slo.itl_s,
        "admission_ttft_s": admit,
        "engine_ttft_s": ctl.engine_ttft_s,
        "queue_budget_s": ctl.queue_budget_s(admit) if deadline and admit is not None else None,
        "tenant_ttft_s": dict(ctl.tenant_ttft_slo_s),
    }


@dataclass
class GatewayContext:
    """One gateway: its settings, admission, the upstream client and health."""

    settings: GatewaySettings
    admission: AdmissionController
    admin_token: str | None
    clock: Callable[[], float] = time.perf_counter
    upstream: UpstreamHealth = field(init=False)
    session: aiohttp.ClientSession | None = None
    """The upstream client, opened and closed by the app's lifespan."""
    handler_time: HandlerTime = field(default_factory=HandlerTime)
    """The handler's own time per proxied request (llmtop/gateway/server/handler_time.py)."""
    base_url: str = field(init=False)
    """The first upstream's base URL (the autopilot reads its /metrics)."""
    balancer: Balancer = field(init=False)
    """The upstream replicas and which one takes the next request."""
    shared: SharedLimits = field(default_factory=LocalLimits)
    """Limits shared with other gateways (gateway/upstreams/shared.py); local when alone."""
    callers: CallerRules = field(init=False)
    """Who may claim which tenant and priority (llmtop/gateway/admission/callers.py)."""
    upstream_errors: UpstreamErrors = field(default_factory=UpstreamErrors)
    """Upstream failures by reason: vLLM's 503 refusals apart from its faults."""
    unanswered: Unanswered = field(default_factory=Unanswered)
    """Requests without a first byte yet: the age of the oldest queued and the oldest at the
    engine, which TTFT histograms only show once they are answered."""
    drain: Drain = field(init=False)
    """The drain after SIGTERM (llmtop/asgi/drain.py): /readyz reads it, the runner's signal
    handler starts it, the housekeeping tick cuts what is left at its end."""
    following: bool = False
    """A feed decides the replicas (upstream_feed.py): `settings.upstream` is its first set,
    which may be empty."""
    history: HistoryKeeper | None = None
    """The history's keeper (gateway/history/keeper.py), set by create_app; None: not kept."""

    def __post_init__(self) -> None:
        s = self.settings
        urls = upstream_urls(s.upstream) or ([] if self.following else [DEFAULT_UPSTREAM])
        self.base_url = urls[0] if urls else DEFAULT_UPSTREAM  # until the feed names one
        self.balancer = Balancer(
            urls,
            eject_s=s.eject_s,
            max_per_replica=s.replica_max_concurrency,
            deadline_s=s.replica_deadline_s,
            allow_empty=self.following,
        )
        self.callers = CallerRules(s.api_keys, trust_headers=s.trust_client_headers)
        self.upstream = UpstreamHealth(self.base_url)
        self.admission.tenant_ttft_slo_s = dict(s.tenant_ttft_slo_s)
        self.drain = Drain(grace_s=s.drain_grace_s, timeout_s=s.drain_timeout_s)

    def apply_shares(self) -> None:
        """Admission's cap from outside its limits: the shared grant (Redis) and the room of
        the live replicas, whichever is smaller."""
        caps = [c for c in (self.shared.slots, self.balancer.capacity()) if c is not None]
        kv = self.shared.kv_blocks
        slots = min(caps) if caps else None
        ctl = self.admission
        if slots != ctl.share_slots or kv != ctl.share_kv_blocks:
            ctl.set_share(slots, kv)

    def stats(self) -> StatsDoc:
        """The /admin/stats document (typed in core.base.admin_api)."""
        out = self.admission.stats()
        out["slo"] = slo_stats(self.admission, self.settings.slo)
        out["upstream"] = self.upstream.to_dict()
        out["replicas"] = self.balancer.to_list()
        out["shared"] = self.shared.status()
        out["handler_s"] = self.handler_time.quantiles(self.clock())
        out["upstream_errors"] = self.upstream_errors.by_reason()
        now = self.clock()
        out["oldest_queued_s"] = self.unanswered.oldest_queued_s(now)
        out["oldest_unanswered_s"] = self.unanswered.oldest_admitted_s(now)
        out["history"] = (
            self.history.status() if self.history else {"on": False, "why_off": "not kept here"}
        )
        return cast(StatsDoc, out)
