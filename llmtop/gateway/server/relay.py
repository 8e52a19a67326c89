"""Relaying an upstream's answer to the client: its head (hop-by-hop headers dropped, the gateway's
own added), then its body chunk by chunk as it arrives, all but the body's end. Per chunk: one read
(aiohttp's `readany`), one ASGI send, the upstream wait summed, and the `data: [DONE]` watch, which
also counts events for the replica's decode rate (cost: BENCHMARKS §16). An upstream failing
mid-body ends an event stream with an error event and `[DONE]`: a cut stream never looks whole."""

from __future__ import annotations

import asyncio

import aiohttp

from llmtop.gateway.server.context import GatewayContext
from llmtop.gateway.server.exchange import Exchange
from llmtop.gateway.server.wire import DROP_RESPONSE, describe_error, error_body
from llmtop.gateway.upstreams.balancer import TokenMeter

_DONE = b"data: [DONE]"
"""An OpenAI stream's last event: a client may close as soon as it has read it."""


async def relay(
    state: GatewayContext,
    exchange: Exchange,
    response: aiohttp.ClientResponse,
    upstream_s: float,
    meter: TokenMeter,
) -> tuple[float, str | None]:
    """Pass the answer's head and its body back as they arrive, all but the body's end:
    (seconds spent awaiting the upstream, the error that cut the body or None). A stream's
    events and decoding time go to `meter` (its replica's)."""
    clock = state.clock
    send = exchange.send
    t0, queue_s, ticket = exchange.t0, exchange.queue_s, exchange.ticket
    status = response.status
    out = [(n, v) for n, v in response.raw_headers if n.lower() not in DROP_RESPONSE]
    out.append((b"x-llmtop-queue-ms", f"{queue_s * 1000.0:.3f}".encode()))
    if ticket is not None:
        out.append((b"x-llmtop-priority", ticket.priority.encode()))
    so_far = clock() - t0 - queue_s - upstream_s
    out.append((b"x-llmtop-handler-to-headers-ms", f"{so_far * 1000.0:.3f}".encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    exchange.started = True
    exchange.status = status
    sse = exchange.sse = response.content_type == "text/event-stream"
    first = ticket is not None and status == 200
    watch_done = sse and status == 200
    tail = b""
    begun = watch_done  # a stream counts in its replica's meter from its head to its end
    whole = first and not sse  # a whole answer counts at its end: its tokens over its time
    if begun:
        meter.begin()
    readany = response.content.readany
    try:
        while True:
            t_wait = clock()
            chunk = await readany()
            now = clock()
            upstream_s += now - t_wait
            if not chunk:
                break
            if first and ticket is not None:
                ticket.first_token()  # unstreamed: its last byte too (prefill_due came first)
                state.admission.record_ttft(now - t0, queue_s)
                state.unanswered.answered(id(ticket))
                first = False
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if watch_done:  # [DONE] may straddle two reads: one cut mid-event keeps a tail
                meter.events += chunk.count(b"data:")
                if _DONE in chunk or (tail and _DONE in tail + chunk[: len(_DONE)]):
                    exchange.done_relayed = True
                    watch_done = begun = False
                    meter.end()
                else:
                    tail = b"" if chunk.endswith(b"\n\n") else chunk[-len(_DONE) :]
            elif whole:
                tail = chunk  # the usage comes last
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        reason = f"upstream failed mid-response: {describe_error(e)}"
        state.upstream.failed(reason)
        state.upstream_errors.record("mid_response")
        if sse:  # a cut body must not look whole: a plain one ends without its last chunk
            err = error_body(502, reason, "upstream_error").decode()
            tail = f"data: {err}\n\ndata: [DONE]\n\n".encode()
            await send({"type": "http.response.body", "body": tail})
        return upstream_s, reason
    finally:
        if begun:
            meter.end()
    if whole:
        meter.answered(tail, clock() - t0 - queue_s)
    return upstream_s, None
