"""The admin API under /admin: read and change the limits live, stats, events, pause/resume, and in
mode advise apply the autopilot's suggestion (POST /admin/autopilot/apply). With a token configured
every call needs `Authorization: Bearer <token>` (compared in constant time); the token is never
echoed in a response, an event or a log line."""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from llmtop.core.base.admin_api import EventDoc, EventsDoc
from llmtop.gateway.admission.controller import LimitError
from llmtop.gateway.history.store import StoreError
from llmtop.gateway.history.window import WindowError, window
from llmtop.gateway.server.context import GatewayContext

Handler = Callable[[Request], Awaitable[Response]]
log = logging.getLogger("llmtop.gateway")
CHUNK_BYTES = 1 << 16
"""What /admin/history sends at a time (read and compressed on a worker thread)."""


def _error(status: int, message: str, type_: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, **extra}}, status)


def _source(request: Request) -> str:
    """Who made a change, for the events list: x-llmtop-source, else "admin"."""
    source = request.headers.get("x-llmtop-source", "admin").strip()
    return source[:64] or "admin"


def _chunks(lines: Iterable[bytes], gzip: bool) -> Iterator[bytes]:
    """The history's lines in blocks of CHUNK_BYTES, gzip-compressed when asked; a file that
    fails midway ends the stream early (the reader says "ends early") and one log line."""
    packer = zlib.compressobj(6, wbits=31) if gzip else None
    block: list[bytes] = []
    size = 0
    try:
        for line in lines:
            block.append(line)
            size += len(line)
            if size >= CHUNK_BYTES:
                data = b"".join(block)
                block, size = [], 0
                yield packer.compress(data) if packer else data
    except StoreError as e:
        log.warning("llmtop gateway: /admin/history: reading the history failed: %s", e.why)
        return
    data = b"".join(block)
    yield packer.compress(data) + packer.flush() if packer else data


def admin_routes(state: GatewayContext) -> list[BaseRoute]:
    """The /admin routes bound to one gateway's state."""
    token = state.admin_token.encode() if state.admin_token else None

    def guarded(handler: Handler) -> Handler:
        async def checked(request: Request) -> Response:
            if token is not None:
                given = request.headers.get("authorization", "")
                scheme, _, value = given.partition(" ")
                if scheme.lower() != "bearer" or not hmac.compare_digest(
                    value.strip().encode(), token
                ):
                    response = _error(401, "admin token required", "authentication_error")
                    response.headers["www-authenticate"] = "Bearer"
                    return response
            return await handler(request)

        return checked

    ctl = state.admission

    async def get_limits(request: Request) -> Response:
        return JSONResponse(ctl.limits.to_dict())

    async def patch_limits(request: Request) -> Response:
        try:
            changes = json.loads(await request.body())
        except ValueError:
            return _error(400, "body must be a JSON object of limits", "invalid_request_error")
        if not isinstance(changes, dict):
            return _error(400, "body must be a JSON object of limits", "invalid_request_error")
        try:
            limits = ctl.set_limits(changes, source=_source(request))
        except LimitError as e:
            return _error(400, e.message, "invalid_request_error", field=e.field)
        await state.shared.publish(ctl)  # the other gateways follow (gateway/upstreams/shared.py)
        return JSONResponse(limits.to_dict())

    async def apply_suggestion(request: Request) -> Response:
        suggestion = (ctl.autopilot or {}).get("suggestion")
        if ctl.limits.mode != "advise" or not suggestion:
            msg = "no suggestion to apply: the autopilot suggests only in mode advise, once it ran"
            return _error(409, msg, "invalid_request_error")
        why = (ctl.autopilot or {}).get("suggestion_reason") or "the autopilot's suggestion"
        try:
            limits = ctl.set_limits(suggestion, source=_source(request), reason=f"applied: {why}")
        except LimitError as e:
            return _error(400, e.message, "invalid_request_error", field=e.field)
        await state.shared.publish(ctl)
        return JSONResponse({"applied": suggestion, "limits": limits.to_dict()})

    async def stats(request: Request) -> Response:
        return JSONResponse(state.stats())

    async def history(request: Request) -> Response:
        keeper = state.history
        if keeper is None or keeper.path is None:
            why = "off" if keeper is None else keeper.why_off
            return _error(503, f"this gateway keeps no history: {why}", "history_off")
        query = request.query_params
        try:
            since, until = window(query.get("since"), query.get("until"), time.time())
        except WindowError as e:
            return _error(400, str(e), "invalid_request_error")
        gzip = "gzip" in request.headers.get("accept-encoding", "").lower()
        blocks = _chunks(keeper.read(since, until), gzip)
        try:  # the file opened and its first rows read before the status goes out
            first = await asyncio.to_thread(next, blocks, b"")
        except StoreError as e:
            return _error(500, f"cannot read the history: {e.why}", "history_error")
        headers = {"content-encoding": "gzip", "vary": "accept-encoding"} if gzip else {}
        return StreamingResponse(
            itertools.chain((first,), blocks), media_type="application/x-ndjson", headers=headers
        )

    async def events(request: Request) -> Response:
        doc: EventsDoc = {"events": [cast(EventDoc, e) for e in ctl.events]}
        return JSONResponse(doc)

    async def pause(request: Request) -> Response:
        ctl.set_paused(True, source=_source(request))
        await state.shared.publish(ctl)
        return JSONResponse({"paused": True})

    async def resume(request: Request) -> Response:
        ctl.set_paused(False, source=_source(request))
        await state.shared.publish(ctl)
        return JSONResponse({"paused": False})

    return [
        Route("/limits", guarded(get_limits), methods=["GET"]),
        Route("/limits", guarded(patch_limits), methods=["PATCH"]),
        Route("/stats", guarded(stats), methods=["GET"]),
        Route("/autopilot/apply", guarded(apply_suggestion), methods=["POST"]),
        Route("/events", guarded(events), methods=["GET"]),
        Route("/history", guarded(history), methods=["GET"]),
        Route("/pause", guarded(pause), methods=["POST"]),
        Route("/resume", guarded(resume), methods=["POST"]),
    ]
