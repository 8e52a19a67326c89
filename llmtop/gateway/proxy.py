"""The proxy: a raw ASGI app that forwards every path to the upstream, generation endpoints
through admission, and streams the answer back chunk by chunk.

Hot path, by design: one pass over the request headers; the body is read (bounded) but parsed
only when the token budget is on; no logging and no re-encoding; the upstream's bytes go out
as they arrive (aiohttp's `readany`, content encoding left alone). A watcher task waits for
the client's http.disconnect while the request is queued or streaming, so a client that
leaves frees its slot and closes the upstream request (vLLM then aborts it) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
from starlette.types import Receive, Scope, Send
from yarl import URL

from llmtop.gateway.admission import PRIORITIES, Rejected, Ticket
from llmtop.gateway.balancer import Replica
from llmtop.gateway.engine_priority import stamp
from llmtop.gateway.footprint import footprint_of
from llmtop.gateway.prompt import prompt_tokens
from llmtop.gateway.state import GatewayState
from llmtop.gateway.upstream_errors import REFUSALS, classify

GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/responses"})
"""POST to these goes through admission; everything else is forwarded at once."""
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# expect: uvicorn answers the client's 100-continue, and the body is read whole before it is
# forwarded; passed on, it would make the upstream client wait for a 100 of the upstream's own
_DROP_REQUEST = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
# uvicorn adds its own date and server; the body goes out chunked, so no content-length
_DROP_RESPONSE = _HOP_BY_HOP | {b"content-length", b"date", b"server"}
_JSON = (b"content-type", b"application/json")
_RETRY = "retry"
# an OpenAI stream's last event: a client may close as soon as it has read it
_DONE = b"data: [DONE]"


class _Relay:
    """What one admitted request has relayed: whether the stream's `data: [DONE]` reached the
    client, so a client that closes right after it (before the upstream's body ends, as with
    vLLM) counts as completed, not cancelled."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


"""An attempt that failed to connect: nothing was sent, another replica may take it."""


class _ClientGone(Exception):
    """The client disconnected before its request body was read."""


class _TooLarge(Exception):
    """The request body is over max_body_bytes."""


def error_body(status: int, message: str, type_: str, **extra: Any) -> bytes:
    """An OpenAI-shaped error: {"error": {"message", "type", "code", ...}}."""
    return json.dumps(
        {"error": {"message": message, "type": type_, "code": status, **extra}}
    ).encode()


async def send_error(
    send: Send,
    status: int,
    message: str,
    type_: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    **extra: Any,
) -> None:
    body = error_body(status, message, type_, **extra)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [_JSON, (b"content-length", str(len(body)).encode()), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def describe_error(e: BaseException) -> str:
    """A short name for an upstream failure, the same whichever HTTP client raised it."""
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return "ConnectTimeout"
    if isinstance(e, asyncio.TimeoutError):
        return "ReadTimeout"
    if isinstance(e, aiohttp.ClientConnectorError):
        return "ConnectError"
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return "ServerDisconnected"
    if isinstance(e, aiohttp.ClientPayloadError):
        return "IncompleteBody"
    if isinstance(e, aiohttp.ClientResponseError):
        return "BadResponse"  # not HTTP, or over the header limits
    return type(e).__name__


class Proxy:
    """The catch-all ASGI endpoint of the gateway."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self._urls: dict[tuple[str, bytes, bytes], URL] = {}

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
        drop = _DROP_REQUEST
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
            await send_error(
                send,
                431,
                f"request headers over {settings.max_header_bytes} bytes (max_header_bytes)",
                "invalid_request_error",
            )
            return
        try:
            body = await _read_body(receive, settings.max_body_bytes)
        except _TooLarge:
            await self._too_large(send)
            return
        except _ClientGone:
            return
        target = (scope.get("raw_path") or scope["path"].encode(), scope["query_string"])
        try:
            self._url(state.base_url, *target)
        except ValueError as e:
            await send_error(send, 400, f"bad request path: {e}", "invalid_request_error")
            return
        generation = scope["method"] == "POST" and scope["path"] in GENERATION_PATHS
        prio = None if priority is None else priority.decode("latin-1")
        if generation and prio is not None and prio not in PRIORITIES:
            await send_error(
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
            bad = next(n for n, v in forward if n not in drop and not _is_utf8(v))
            bad_name = bad.decode("latin-1")
            await send_error(
                send, 400, f"header {bad_name!r} is not valid UTF-8", "invalid_request_error"
            )
            return
        ticket: Ticket | None = None
        if generation:
            ctl = state.controller
            who = state.trust.identify(authorization, prio, tenant)
            kv_blocks, shape = footprint_of(ctl, body)
            rpm = ctl.limits.rate_limit_rpm
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
                    prompt_tokens=(
                        prompt_tokens(body) if ctl.limits.max_inflight_prompt_tokens else 0
                    ),
                    kv_blocks=kv_blocks,
                    shape=shape,
                    rate_checked=shared_rate is not None,
                )
            except Rejected as r:
                await self._reject(send, r)
                return
            if settings.engine_priority:
                body = stamp(body, ticket.priority)
        work = asyncio.ensure_future(
            self._admit_and_forward(scope["method"], target, headers, body, ticket, t0, send)
        )
        watcher = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait((work, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
            if ticket is not None:
                ticket.cancel()  # a no-op unless `work` was cancelled before it ever ran
        if not work.cancelled():
            work.result()  # a bug in the handler surfaces instead of vanishing

    async def _too_large(self, send: Send) -> None:
        limit = self.state.settings.max_body_bytes
        await send_error(
            send,
            413,
            f"request body over {limit} bytes (max_body_bytes)",
            "invalid_request_error",
        )

    async def _reject(self, send: Send, r: Rejected, queue_s: float = 0.0) -> None:
        headers = [
            (b"retry-after", r.retry_after_header.encode()),
            (b"x-llmtop-queue-ms", f"{queue_s * 1000.0:.3f}".encode()),
        ]
        await send_error(send, 429, r.message, "rate_limit_error", headers=headers, reason=r.reason)

    async def _admit_and_forward(
        self,
        method: str,
        target: tuple[bytes, bytes],
        headers: list[tuple[str, str]],
        body: bytes,
        ticket: Ticket | None,
        t0: float,
        send: Send,
    ) -> None:
        """Wait for a slot (if queued), forward, stream back; release the slot exactly once."""
        queue_s = 0.0
        waiting = self.state.unanswered
        key = id(ticket)
        try:
            if ticket is not None and not ticket.admitted:
                waiting.queued(key, t0)
                try:
                    await ticket.wait()
                except Rejected as r:
                    await self._reject(send, r, ticket.queue_wait_s)
                    return
                queue_s = ticket.queue_wait_s
            if ticket is not None:
                # the engine's part only: time queued in the gateway is not the engine's delay
                waiting.admitted(key, t0 + queue_s)
            outcome = "upstream_error"
            relay = _Relay()
            try:
                outcome = await self._forward(
                    method, target, headers, body, ticket, t0, queue_s, send, relay
                )
            except (asyncio.CancelledError, OSError):
                outcome = "completed" if relay.done else "cancelled"
                raise
            finally:
                if ticket is not None:
                    ticket.release(outcome)
        finally:
            waiting.answered(key)

    async def _forward(
        self,
        method: str,
        target: tuple[bytes, bytes],
        headers: list[tuple[str, str]],
        body: bytes,
        ticket: Ticket | None,
        t0: float,
        queue_s: float,
        send: Send,
        relay: _Relay,
    ) -> str:
        """Send to the replica the balancer picks (once more elsewhere if it refused the
        connection: nothing was sent), stream the answer; the outcome of an admitted request."""
        state = self.state
        bal = state.balancer
        kv = ticket.kv_blocks if ticket is not None else 0
        tried: list[Replica] = []
        while True:
            replica = bal.pick(kv, exclude=tried)
            if replica is None:
                await send_error(send, 502, "no upstream replica can take it", "upstream_error")
                return "upstream_error"
            bal.start(replica, kv)
            error: str | None = "cancelled"
            try:
                outcome, error = await self._forward_to(
                    replica,
                    method,
                    target,
                    headers,
                    body,
                    ticket,
                    t0,
                    queue_s,
                    send,
                    relay,
                    not tried,
                )
            finally:
                bal.done(replica, kv, None if error == "cancelled" else error)
                state.apply_shares()
            if outcome != _RETRY:
                return outcome
            tried.append(replica)

    async def _forward_to(
        self,
        replica: Replica,
        method: str,
        target: tuple[bytes, bytes],
        headers: list[tuple[str, str]],
        body: bytes,
        ticket: Ticket | None,
        t0: float,
        queue_s: float,
        send: Send,
        relay: _Relay,
        may_retry: bool,
    ) -> tuple[str, str | None]:
        """One attempt at one replica: (outcome or _RETRY, the error that ejects it or None)."""
        state = self.state
        session = state.session
        assert session is not None, "the upstream session is opened by the app's lifespan"
        clock = state.clock
        url = self._url(replica.url, *target)
        t_send = clock()
        try:
            response = await session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
            )
        except asyncio.TimeoutError as e:
            reason = f"upstream timed out: {describe_error(e)}"
            state.upstream.failed(reason)
            state.upstream_errors.record("timeout")
            await send_error(send, 504, "upstream timed out", "upstream_timeout")
            return "upstream_error", reason
        except aiohttp.ClientError as e:
            reason = f"upstream unreachable: {describe_error(e)}"
            state.upstream.failed(reason)
            if may_retry and isinstance(e, aiohttp.ClientConnectorError):
                return _RETRY, reason  # nothing was sent: another replica may take it
            state.upstream_errors.record("unreachable")
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
            if failed is not None and ticket is not None:
                if await self._wrap_5xx(response, send):
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
            out = [(n, v) for n, v in response.raw_headers if n.lower() not in _DROP_RESPONSE]
            out.append((b"x-llmtop-queue-ms", f"{queue_s * 1000.0:.3f}".encode()))
            if ticket is not None:
                out.append((b"x-llmtop-priority", ticket.priority.encode()))
            so_far = clock() - t0 - queue_s - upstream_s
            out.append((b"x-llmtop-handler-to-headers-ms", f"{so_far * 1000.0:.3f}".encode()))
            await send({"type": "http.response.start", "status": status, "headers": out})
            sse = response.content_type == "text/event-stream"
            first = ticket is not None and status == 200
            watch_done = sse and status == 200
            tail = b""
            content = response.content
            try:
                while True:
                    t_wait = clock()
                    chunk = await content.readany()
                    now = clock()
                    upstream_s += now - t_wait
                    if not chunk:
                        break
                    if first:
                        state.controller.record_ttft(now - t0, queue_s)
                        state.unanswered.answered(id(ticket))
                        first = False
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if watch_done and not relay.done:  # [DONE] may straddle two chunks
                        relay.done = _DONE in chunk or _DONE in tail + chunk[: len(_DONE)]
                        tail = chunk[-len(_DONE) :]
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                reason = f"upstream failed mid-response: {describe_error(e)}"
                state.upstream.failed(reason)
                state.upstream_errors.record("mid_response")
                if not sse:  # a cut body must not look whole: end without its last chunk
                    return "upstream_error", reason
                err = error_body(502, reason, "upstream_error").decode()
                tail = f"data: {err}\n\ndata: [DONE]\n\n".encode()
                await send({"type": "http.response.body", "body": tail})
                return "upstream_error", reason
            whole = True
            await send({"type": "http.response.body", "body": b""})
            end = clock()
            state.handler_time.observe(end, end - t0 - queue_s - upstream_s)
            return ("upstream_error" if status >= 500 else "completed"), failed
        finally:
            # close, not release, unless the body was read to its end: a request cut short
            # (client gone, upstream fault) must drop the connection, so vLLM aborts it
            if whole:
                response.release()
            else:
                response.close()

    async def _wrap_5xx(self, response: aiohttp.ClientResponse, send: Send) -> bool:
        """A generation request the upstream failed: an OpenAI-shaped 502 naming its status, or
        a 503 passed on when vLLM refused by its own queue limit (True: a refusal, not a fault)."""
        snippet = b""
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async for chunk in response.content.iter_any():
                snippet += chunk
                if len(snippet) > 2048:
                    break
        text = snippet[:500].decode("utf-8", "replace").strip()
        why = classify(response.status, snippet)
        self.state.upstream_errors.record(why, response.status)
        if why in REFUSALS:  # vLLM shed load: retryable, as vLLM meant it, not a fault
            await send_error(
                send,
                503,
                f"the engine refused the request ({REFUSALS[why]}): {text}",
                "engine_overloaded",
                headers=[(b"retry-after", b"1")],
                reason=why,
                upstream_status=response.status,
            )
            return True
        await send_error(
            send,
            502,
            f"upstream returned {response.status}: {text}",
            "upstream_error",
            upstream_status=response.status,
            reason=why,
        )
        return False
