"""The gateway's Starlette app: /admin, /metrics, /healthz (liveness), /readyz (readiness:
503 from the first SIGTERM on, docs/gateway.md) and the proxy for every other path.

The upstream aiohttp session and a 50 ms housekeeping task (queue timeouts, a light upstream
health probe, the drain's cut) are owned by the lifespan, so they open and close with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from llmtop.errors import ConfigError
from llmtop.gateway.admission.controller import AdmissionController, LimitError
from llmtop.gateway.history.keeper import HistoryKeeper
from llmtop.gateway.server import autopilot_loop, history_loop, replica_watch, upstream_feed
from llmtop.gateway.server.admin import admin_routes
from llmtop.gateway.server.context import GatewayContext, limits_of, upstream_timeout
from llmtop.gateway.server.handler_time import TimedResponse
from llmtop.gateway.server.metrics import metrics_endpoint
from llmtop.gateway.server.proxy import Proxy
from llmtop.gateway.server.upstream_feed import UpstreamFeed
from llmtop.gateway.server.wire import describe_error
from llmtop.gateway.upstreams.shared import LocalLimits, RedisLimits, SharedLimits
from llmtop.settings import GatewaySettings, resolve_token

log = logging.getLogger("llmtop.gateway")

TICK_S = 0.05
"""How often queue timeouts are checked: a waiter leaves at most this late."""
HEALTH_INTERVAL_S = 5.0
"""How often the upstream's /health is probed (proxied answers update health in between)."""


def make_session(settings: GatewaySettings) -> aiohttp.ClientSession:
    """The upstream client: no connection cap (admission is the cap), no env proxies, no
    default headers (a client's own Accept-Encoding and User-Agent pass through unchanged, and
    none is added), bodies passed through undecoded, and a cookie jar that keeps nothing (one
    user's Set-Cookie must never reach another's request). Idle connections go after 2 s,
    before the upstream's keep-alive (5 s in uvicorn) can close one under a request. aiohttp,
    not httpx: 0.46x the CPU per proxied stream (BENCHMARKS §2).
    """
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=2.0)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=upstream_timeout(settings),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
        trust_env=False,
        response_class=TimedResponse,
        # a response header as long as the longest request header block we take (64 KiB by
        # default), not aiohttp's 8 KiB: a long Set-Cookie must not turn into a 502
        max_line_size=settings.max_header_bytes,
        max_field_size=settings.max_header_bytes,
    )


async def _probe(state: GatewayContext) -> None:
    """One /health probe, on its own task: a hung upstream must not stall queue timeouts."""
    assert state.session is not None
    try:
        async with state.session.get(
            state.base_url + "/health",
            timeout=aiohttp.ClientTimeout(total=2.0),
            allow_redirects=False,
        ) as r:
            status = r.status
        if status < 500:
            state.upstream.ok()
        else:
            state.upstream.failed(f"/health returned {status}")
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        state.upstream.failed(f"upstream unreachable: {describe_error(e)}")


def _watch_drain(state: GatewayContext, proxy: Proxy, seen: str) -> str:
    """One line in the log when the drain starts and when it cuts; the cut itself (each
    request in flight ended with an error) is the proxy's. At its start the shared limits say
    so to the other gateways. Returns the phase now."""
    drain = state.drain
    phase = drain.phase()
    if phase == seen:
        return phase
    if seen == "ready":
        state.shared.begin_drain()  # the other gateways hear of it at once
        log.info(
            "llmtop gateway: %s: /readyz fails; new requests served %.3g s more, then up to"
            " %.3g s for the %d in flight",
            drain.signal_name,
            max(0.0, drain.accept_until - drain.clock()),
            drain.timeout_s,
            len(proxy.live),
        )
    if phase == "cut" and proxy.live:
        streams, waiting = proxy.cut_all(drain.cut_reason())
        log.warning(
            "llmtop gateway: drain over: %d requests cut (%d answering, %d not yet), each"
            " ended with an error",
            streams + waiting,
            streams,
            waiting,
        )
    return phase


def final_counts(state: GatewayContext, proxy: Proxy) -> dict[str, object]:
    """What the gateway answered over its life, logged as it stops: every proxied request's
    status (0: the client left before any answer), admission's offered and outcomes."""
    ctl = state.admission
    return {
        "answers": {str(k): v for k, v in sorted(proxy.statuses.items())},
        "offered": ctl.offered,
        "outcomes": dict(ctl.outcomes),
    }


async def _housekeeping(state: GatewayContext, proxy: Proxy) -> None:
    """Expire queued requests every tick; probe the upstream's /health now and then; at the
    drain's end, cut what is left."""
    ctl = state.admission
    next_probe = 0.0
    probe: asyncio.Future[None] | None = None
    phase = "ready"
    try:
        while True:
            ctl.expire()
            phase = _watch_drain(state, proxy, phase)
            now = time.monotonic()
            idle = probe is None or probe.done()
            if now >= next_probe and state.session is not None and idle and state.balancer.replicas:
                next_probe = now + HEALTH_INTERVAL_S
                probe = asyncio.ensure_future(_probe(state))
            await asyncio.sleep(TICK_S)
    finally:
        if probe is not None and not probe.done():
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe


class GatewayApp(Starlette):
    """Starlette for the gateway's own routes; every other HTTP request goes straight to the
    proxy, skipping the middleware stack and the router on the hot path."""

    def __init__(self, proxy: Proxy, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if not (path in _OWN_PATHS or path.startswith("/admin/")):
                await self.proxy(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


_OWN_PATHS = frozenset({"/metrics", "/healthz", "/readyz", "/admin"})


def create_app(
    settings: GatewaySettings,
    *,
    clock: Callable[[], float] | None = None,
    feed: UpstreamFeed | None = None,
    history: HistoryKeeper | None = None,
) -> Starlette:
    """The gateway for `settings`; `clock` (monotonic seconds) drives admission, for tests;
    `feed`: the upstreams follow it (Kubernetes' Ready pods), `settings.upstream` its first set;
    `history`: keeps its polls (`history_loop.keeper_of(settings)`: `llmtop gateway` passes it)."""
    try:
        controller = AdmissionController(limits_of(settings), clock=clock or time.monotonic)
    except LimitError as e:
        raise ConfigError(f"gateway: {e.message}") from None
    if settings.eject_s < 0 or settings.lease_ttl_s <= 0:
        raise ConfigError(
            f"gateway: eject_s must be >= 0 and lease_ttl_s > 0, got {settings.eject_s:g}"
            f" and {settings.lease_ttl_s:g}"
        )
    if settings.replica_max_concurrency is not None and settings.replica_max_concurrency < 1:
        raise ConfigError(
            f"gateway: replica_max_concurrency must be >= 1, got {settings.replica_max_concurrency}"
        )
    if settings.max_body_bytes < 1:
        raise ConfigError(f"gateway: max_body_bytes must be >= 1, got {settings.max_body_bytes}")
    token = resolve_token(settings).admin_token  # read here only for settings built by hand
    shared: SharedLimits = LocalLimits()
    if settings.redis_url:
        try:
            shared = RedisLimits(settings.redis_url, ttl_s=settings.lease_ttl_s)
        except ValueError as e:
            raise ConfigError(f"gateway: redis_url {settings.redis_url!r}: {e}") from None
    try:
        state = GatewayContext(
            settings=settings,
            admission=controller,
            admin_token=token,
            shared=shared,
            following=feed is not None,
        )
    except ValueError as e:  # the drain's seconds
        raise ConfigError(f"gateway: {e}") from None
    proxy = Proxy(state)
    state.history = history  # docs/recording.md, "History in the gateway"
    state.apply_shares()  # with Redis: no room until it grants some
    controller_of_budget = autopilot_loop.attach(state)  # the autopilot (docs/autopilot.md)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.session = make_session(settings)
        task = asyncio.ensure_future(_housekeeping(state, proxy))
        autopilot = asyncio.ensure_future(autopilot_loop.run(state, controller_of_budget))
        watcher = asyncio.ensure_future(replica_watch.watch(state))
        sync = asyncio.ensure_future(state.shared.run(controller, state.apply_shares))
        tasks = [task, autopilot, watcher, sync]
        history = history_loop.start(state)
        if feed is not None:
            tasks.append(asyncio.ensure_future(upstream_feed.follow(state, feed)))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await state.shared.close()
            await history_loop.stop(state, history)
            await state.session.close()
            log.info("llmtop gateway: stopped: %s", json.dumps(final_counts(state, proxy)))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "upstream": state.upstream.to_dict()})

    async def readyz(request: Request) -> Response:
        doc = state.drain.to_dict()
        return JSONResponse(doc, status_code=200 if doc["ready"] else 503)

    app = GatewayApp(
        proxy,
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint(state, proxy.statuses), methods=["GET"]),
            Mount("/admin", routes=admin_routes(state)),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = state
    return app
