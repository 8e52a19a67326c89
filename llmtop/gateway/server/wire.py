"""The proxy's side of the wire: which headers pass each way, OpenAI-shaped error answers (an
upstream's 5xx wrapped into one), reading a bounded request body, and an upstream failure named
the same whichever aiohttp call raised it. Shared by the proxy, the app's /health probe and the
replicas' watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
from starlette.types import Receive, Send

from llmtop.gateway.server.upstream_errors import REFUSALS, UpstreamErrors, classify

HOP_BY_HOP = frozenset(
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
DROP_REQUEST = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
"""Request headers never forwarded (with those the client's Connection header names)."""
# uvicorn adds its own date and server; the body goes out chunked, so no content-length
DROP_RESPONSE = HOP_BY_HOP | {b"content-length", b"date", b"server"}
"""Response headers never passed back."""
_JSON = (b"content-type", b"application/json")


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


class TooLarge(Exception):
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
    """Answer with an OpenAI-shaped error body."""
    body = error_body(status, message, type_, **extra)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [_JSON, (b"content-length", str(len(body)).encode()), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; TooLarge past `limit` bytes, ClientGone on a disconnect."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def until_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def is_utf8(value: bytes) -> bool:
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


async def wrap_5xx(response: aiohttp.ClientResponse, send: Send, errors: UpstreamErrors) -> bool:
    """A generation request the upstream failed: an OpenAI-shaped 502 naming its status, or
    a 503 passed on when vLLM refused by its own queue limit (True: a refusal, not a fault);
    counted in `errors` by reason."""
    snippet = b""
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        async for chunk in response.content.iter_any():
            snippet += chunk
            if len(snippet) > 2048:
                break
    text = snippet[:500].decode("utf-8", "replace").strip()
    why = classify(response.status, snippet)
    errors.record(why, response.status)
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
