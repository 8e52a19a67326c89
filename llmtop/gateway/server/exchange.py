"""One proxied request's state (`Exchange`), and how one cut by the drain ends: the proxy's
steps read and update it; the drain's cut (llmtop/asgi/drain.py) ends it with an error the
client can read, whatever it had been sent so far.
"""

from __future__ import annotations

from starlette.types import Send

from llmtop.gateway.admission.ticket import Ticket
from llmtop.gateway.server.wire import error_body, send_error


class Exchange:
    """One proxied request, from its head to the end of its answer: what each step of the
    forward (admission, the retry over replicas, one attempt) reads and updates."""

    __slots__ = (
        "body",
        "cut",
        "done_relayed",
        "gone",
        "headers",
        "method",
        "queue_s",
        "send",
        "sse",
        "started",
        "status",
        "t0",
        "target",
        "ticket",
        "watching",
    )

    def __init__(
        self,
        method: str,
        target: tuple[bytes, bytes],
        headers: list[tuple[str, str]],
        body: bytes,
        t0: float,
        send: Send,
    ) -> None:
        self.method = method
        self.target = target
        """(raw path, query string), forwarded as the client sent them."""
        self.headers = headers
        """The headers to forward, decoded as aiohttp writes them."""
        self.body = body
        self.t0 = t0
        """When the request reached the gateway (the clock's seconds)."""
        self.send = send
        self.ticket: Ticket | None = None
        """Its place in admission (generation requests only)."""
        self.queue_s = 0.0
        """Seconds it waited in the admission queue."""
        self.done_relayed = False
        """The stream's `data: [DONE]` reached the client, so a client that closes right after
        it (before the upstream's body ends, as with vLLM) counts as completed, not cancelled."""
        self.started = False
        """The answer's head went to the client."""
        self.sse = False
        """The answer is an event stream (an error event can end it)."""
        self.cut: str | None = None
        """Why the drain cut it (its work was cancelled for that), or None."""
        self.status: int | None = None
        """The status of the answer it got (None: none yet)."""
        self.watching = True
        """Its client's disconnect still cancels its task (False once the handler is done)."""
        self.gone = False
        """Its client left before the answer was over."""


async def end_cut(exchange: Exchange) -> None:
    """End a request the drain cut: a 503 with a JSON body when nothing was sent yet; an SSE
    error event and [DONE] on a stream; a plain body already begun cannot be made whole, so
    it ends without its last chunk (the client sees a cut body, not a short one)."""
    reason = exchange.cut or "the gateway is shutting down"
    if not exchange.started:
        exchange.status = 503
        await send_error(
            exchange.send,
            503,
            reason,
            "gateway_shutting_down",
            headers=[(b"retry-after", b"1")],
        )
    elif exchange.sse:
        err = error_body(503, reason, "gateway_shutting_down").decode()
        tail = f"data: {err}\n\ndata: [DONE]\n\n".encode()
        await exchange.send({"type": "http.response.body", "body": tail})


__all__ = ["Exchange", "end_cut"]
