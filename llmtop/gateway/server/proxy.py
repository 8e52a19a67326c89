"""The proxy: a raw ASGI app that forwards every path to the upstream (generation endpoints through
admission) and streams the answer back as it arrives: one pass over the headers, the bounded body
parsed only for the token budget, no logging or re-encoding. A watcher task cancels the request's
task on http.disconnect, so a client that leaves frees its slot and the upstream aborts at once. A
request is one `Exchange` (sent once more elsewhere if refused), in `live` for the drain."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
from starlette.types import Receive, Scope, Send
from yarl import URL

from llmtop.gateway.admission.controller import PRIORITIES, Rejected
from llmtop.gateway.admission.footprint import footprint_of
from llmtop.gateway.admission.prompt import prompt_tokens
from llmtop.gateway.server.context import GatewayContext
from llmtop.gateway.server.engine_priority import stamp
from llmtop.gateway.server.exchange import Exchange, end_cut
from llmtop.gateway.server.relay import relay
from llmtop.gateway.server.upstream_errors import classify
from llmtop.gateway.server.wire import (
    DROP_REQUEST,
    ClientGone,
    TooLarge,
    describe_error,
    is_utf8,
    read_body,
    send_error,
    until_disconnect,
    wrap_5xx,
)
from llmtop.gateway.upstreams.balancer import Replica

GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/responses"})
"""POST to these goes through admission; everything else is forwarded at once."""
_RETRY = "retry"
"""An attempt that failed to connect: nothing was sent, another replica may take it."""


class Proxy:
    """The catch-all ASGI endpoint of the gateway."""

    def __init__(self, state: GatewayContext) -> None:
        self.state = state
        self._urls: dict[tuple[str, bytes, bytes], URL] = {}
        self.live: dict[asyncio.Task[object], Exchange] = {}
        """Each request's task in flight (queued or forwarded) -> its exchange."""
        self.statuses: Counter[int] = Counter()
        """Answers by status since start, every proxied request once (0: none, the client
        left first); logged when the gateway stops, exported in /metrics."""

    def cut_all(self, reason: str) -> tuple[int, int]:
        """The drain is over: cancel every request's task, each to be ended with an error by
        its own handler (`end_cut`). Returns (answering, not answered yet)."""
        answering = 0
        for task, exchange in list(self.live.items()):
            if exchange.cut is None and not task.done():
                exchange.cut = reason
                answering += exchange.started
                task.cancel()
        return answering, len(self.live) - answering

    def _url(self, base: str, path: bytes, query: bytes) -> URL:
        """The upstream URL of a path, parsed once: a few paths carry nearly all the traffic."""
        key = (base, path, query)
        url = self._urls.get(key)
        if url is None:
            text = base + path.decode("latin-1")
            if query:
                text += "?" + query.decode("latin-1")
            url = URL(text, encoded=True)  # forwarded as the client sent it
            if url.host is None:
                raise ValueError(f"no host in {text!r}")
            if len(self._urls) < 256:
                self._urls[key] = url
        return url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        t0 = state.clock()
        settings = state.settings
        forward: list[tuple[bytes, bytes]] = []
        priority = tenant = authorization = None
        drop = DROP_REQUEST
        header_bytes = 0
        for name, value in scope["headers"]:
            header_bytes += len(name) + len(value) + 4
            if name == b"x-llmtop-priority":
                priority = value.strip().lower()
            elif name == b"x-llmtop-tenant":
                tenant = value
            elif name == b"authorization":
                authorization = value
            elif name == b"connection":
                drop = drop | {t.strip().lower() for t in value.split(b",")}
            elif (
                name == b"content-length"
                and value.isdigit()
                and int(value) > settings.max_body_bytes
            ):
                await self._too_large(send)
                return
            forward.append((name, value))
        if header_bytes > settings.max_header_bytes:
            await self._refuse(
                send,
                431,
                f"request headers over {settings.max_header_bytes} bytes (max_header_bytes)",
                "invalid_request_error",
            )
            return
        try:
            body = await read_body(receive, settings.max_body_bytes)
        except TooLarge:
            await self._too_large(send)
            return
        except ClientGone:
            self.statuses[0] += 1
            return
        target = (scope.get("raw_path") or scope["path"].encode(), scope["query_string"])
        try:
            self._url(state.base_url, *target)
        except ValueError as e:
            await self._refuse(send, 400, f"bad request path: {e}", "invalid_request_error")
            return
        generation = scope["method"] == "POST" and scope["path"] in GENERATION_PATHS
        prio = None if priority is None else priority.decode("latin-1")
        if generation and prio is not None and prio not in PRIORITIES:
            await self._refuse(
                send,
                400,
                f"x-llmtop-priority must be one of {', '.join(PRIORITIES)}, got {prio!r}",
                "invalid_request_error",
            )
            return
        try:
            # aiohttp writes header values as UTF-8: decoded so, they go out byte for byte
            headers = [(n.decode("latin-1"), v.decode()) for n, v in forward if n not in drop]
        except UnicodeDecodeError:
            bad = next(n for n, v in forward if n not in drop and not is_utf8(v))
            bad_name = bad.decode("latin-1")
            await self._refuse(
                send, 400, f"header {bad_name!r} is not valid UTF-8", "invalid_request_error"
            )
            return
        exchange = Exchange(scope["method"], target, headers, body, t0, send)
        if generation and not await self._enter(exchange, authorization, prio, tenant):
            self.statuses[429] += 1
            return
        # the request's work runs in this task; a watcher cancels it when the client leaves
        # (one task per request fewer than a work task beside it: memory per queued request,
        # BENCHMARKS §16)
        task = asyncio.current_task()
        assert task is not None
        live = self.live
        live[task] = exchange
        watcher = asyncio.ensure_future(until_disconnect(receive))

        def left(w: asyncio.Future[None]) -> None:
            if exchange.watching and not w.cancelled():
                exchange.gone = True
                task.cancel()

        watcher.add_done_callback(left)
        try:
            await self._admit_and_forward(exchange)
        except asyncio.CancelledError:
            if not exchange.gone and exchange.cut is None:
                raise  # not ours: the server's own shutdown
            uncancel = getattr(task, "uncancel", None)  # 3.11+: the cancel was handled
            if uncancel is not None:
                uncancel()
        finally:
            exchange.watching = False
            del live[task]
            watcher.cancel()
            if exchange.ticket is not None:
                exchange.ticket.cancel()  # a no-op unless it was cancelled before it ran
        if exchange.cut is not None and not exchange.gone:
            await end_cut(exchange)
        self.statuses[exchange.status or 0] += 1

    async def _enter(
        self,
        exchange: Exchange,
        authorization: bytes | None,
        prio: str | None,
        tenant: bytes | None,
    ) -> bool:
        """Enter a generation request into admission (`exchange.ticket`); False when it was refused
        (the 429 is sent)."""
        state = self.state
        ctl = state.admission
        body = exchange.body
        who = state.callers.caller(authorization, prio, tenant)
        kv_blocks, shape = footprint_of(ctl, body)
        lim = ctl.limits
        if shape is not None and ctl.footprint is not None:
            tokens = ctl.footprint.prompt_tokens(shape)
        elif lim.max_inflight_prompt_tokens or lim.max_unprefilled_prompt_tokens:
            tokens = prompt_tokens(body)
        else:
            tokens = 0  # no budget counts prompts: the body is not read for them
        rpm = lim.rate_limit_rpm
        shared_rate = None  # the rate limit held in Redis, when there is one that answers
        if rpm is not None and state.shared.backend == "redis":
            shared_rate = await state.shared.rate_check(who.tenant or "", rpm)
        try:
            if shared_rate:
                msg = f"rate limited: over {rpm:g} requests/min (rate_limit_rpm, all gateways)"
                raise ctl.refuse("rate_limited", msg, shared_rate)
            ticket = ctl.enter(
                who.priority,
                tenant=who.tenant,
                prompt_tokens=tokens,
                kv_blocks=kv_blocks,
                shape=shape,
                rate_checked=shared_rate is not None,
            )
        except Rejected as r:
            await self._reject(exchange, r)
            return False
        exchange.ticket = ticket
        if state.settings.engine_priority:
            exchange.body = stamp(body, ticket.priority)
        return True

    async def _refuse(self, send: Send, status: int, message: str, type_: str) -> None:
        """A request refused before it is an exchange (counted here)."""
        self.statuses[status] += 1
        await send_error(send, status, message, type_)

    async def _too_large(self, send: Send) -> None:
        limit = self.state.settings.max_body_bytes
        await self._refuse(
            send,
            413,
            f"request body over {limit} bytes (max_body_bytes)",
            "invalid_request_error",
        )

    async def _reject(self, exchange: Exchange, r: Rejected, queue_s: float = 0.0) -> None:
        exchange.status = 429
        headers = [
            (b"retry-after", r.retry_after_header.encode()),
            (b"x-llmtop-queue-ms", f"{queue_s * 1000.0:.3f}".encode()),
        ]
        await send_error(
            exchange.send, 429, r.message, "rate_limit_error", headers=headers, reason=r.reason
        )

    async def _admit_and_forward(self, exchange: Exchange) -> None:
        """Wait for a slot (if queued), forward, stream back; release the slot exactly once."""
        waiting, shared = self.state.unanswered, self.state.shared
        ticket = exchange.ticket
        key = id(ticket)
        try:
            if ticket is not None and not ticket.admitted:
                waiting.queued(key, exchange.t0)
                try:
                    await ticket.wait()
                except Rejected as r:
                    await self._reject(exchange, r, ticket.queue_wait_s)
                    return
                exchange.queue_s = ticket.queue_wait_s
            if ticket is not None:
                # the engine's part only: time queued in the gateway is not the engine's delay
                waiting.admitted(key, exchange.t0 + exchange.queue_s)
                shared.admitted(key, self.state.admission.now())
            outcome = "upstream_error"
            try:
                outcome = await self._forward(exchange)
            except (asyncio.CancelledError, OSError):
                if exchange.done_relayed:
                    outcome = "completed"
                else:  # the drain's cut is the gateway's failure, not the client's leaving
                    outcome = "cancelled" if exchange.cut is None else "upstream_error"
                raise
            finally:
                if ticket is not None:
                    ticket.release(outcome)
                    shared.ended(key, self.state.admission.now())
        finally:
            waiting.answered(key)

    async def _forward(self, exchange: Exchange) -> str:
        """Send to the replica the balancer picks (once more elsewhere if it refused the
        connection: nothing was sent), stream the answer; the outcome of an admitted request."""
        state = self.state
        bal = state.balancer
        kv = exchange.ticket.kv_blocks if exchange.ticket is not None else 0
        tried: list[Replica] = []
        while True:
            replica = bal.pick(kv, exclude=tried)
            if replica is None:
                if not tried and not bal.serving():
                    # Following pods, none Ready yet or all draining: come back, not broken.
                    exchange.status = 503
                    await send_error(
                        exchange.send,
                        503,
                        "no upstream replica in rotation yet",
                        "upstream_error",
                        headers=[(b"retry-after", b"1")],
                    )
                    return "upstream_error"
                exchange.status = 502
                await send_error(
                    exchange.send, 502, "no upstream replica can take it", "upstream_error"
                )
                return "upstream_error"
            bal.start(replica, kv)
            error: str | None = "cancelled"
            try:
                outcome, error = await self._forward_to(exchange, replica, not tried)
            finally:
                bal.done(replica, kv, None if error == "cancelled" else error)
                state.apply_shares()
            if outcome != _RETRY:
                return outcome
            tried.append(replica)

    async def _forward_to(
        self, exchange: Exchange, replica: Replica, may_retry: bool
    ) -> tuple[str, str | None]:
        """One attempt at one replica: (outcome or _RETRY, the error that ejects it or None)."""
        state = self.state
        session = state.session
        assert session is not None, "the upstream session is opened by the app's lifespan"
        clock = state.clock
        send = exchange.send
        url = self._url(replica.url, *exchange.target)
        t_send = clock()
        try:
            response = await session.request(
                exchange.method,
                url,
                headers=exchange.headers,
                data=exchange.body or None,
                allow_redirects=False,
            )
        except asyncio.TimeoutError as e:
            reason = f"upstream timed out: {describe_error(e)}"
            state.upstream.failed(reason)
            state.upstream_errors.record("timeout")
            exchange.status = 504
            await send_error(send, 504, "upstream timed out", "upstream_timeout")
            return "upstream_error", reason
        except aiohttp.ClientError as e:
            reason = f"upstream unreachable: {describe_error(e)}"
            state.upstream.failed(reason)
            if may_retry and isinstance(e, aiohttp.ClientConnectorError):
                return _RETRY, reason  # nothing was sent: another replica may take it
            state.upstream_errors.record("unreachable")
            exchange.status = 502
            await send_error(send, 502, reason, "upstream_error")
            return "upstream_error", reason
        # time awaiting the upstream (its headers, then each chunk): the upstream's, not ours;
        # building and writing the request are ours (TimedResponse times only the wait)
        upstream_s = getattr(response, "headers_wait_s", None)
        if upstream_s is None:  # a session without TimedResponse (never the app's own)
            upstream_s = clock() - t_send
        whole = False  # the body read to its end: the connection may go back to the pool
        try:
            status = response.status
            failed = f"upstream returned {status}" if status >= 500 else None
            if failed is not None and exchange.ticket is not None:
                refused = await wrap_5xx(response, send, state.upstream_errors)
                exchange.status = 503 if refused else 502
                if refused:
                    # vLLM refused by its own queue limit: a busy engine, not a broken one, so
                    # it is neither marked unhealthy nor ejected from the replicas
                    return "upstream_error", None
                state.upstream.failed(failed)
                return "upstream_error", failed
            if failed is not None:
                state.upstream.failed(failed)
                state.upstream_errors.record(classify(status, b""), status)
            else:
                state.upstream.ok()
            upstream_s, cut = await relay(state, exchange, response, upstream_s, replica.meter)
            if cut is not None:
                return "upstream_error", cut
            whole = True
            await send({"type": "http.response.body", "body": b""})
            end = clock()
            state.handler_time.observe(end, end - exchange.t0 - exchange.queue_s - upstream_s)
            return ("upstream_error" if status >= 500 else "completed"), failed
        finally:
            # close, not release, unless the body was read to its end: a request cut short
            # (client gone, upstream fault) must drop the connection, so vLLM aborts it
            if whole:
                response.release()
            else:
                response.close()
