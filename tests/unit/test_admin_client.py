"""AdminClient against the real gateway on 127.0.0.1, and stand-ins for the failures a gateway
cannot be made to produce on demand (slow, 5xx, not JSON). Every failure is one AdminError line
and never contains the token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.errors import AdminError
from llmtop.settings import MonitorSettings
from llmtop.sources.gateway import AdminClient

TOKEN = "s3cret-admin-token"
NOWHERE = "http://127.0.0.1:9"


async def test_read_and_change_limits_on_the_real_gateway(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8, max_queue=128)
    admin = AdminClient(gw.url)
    try:
        limits = await admin.get_limits()
        assert (limits["max_concurrency"], limits["max_queue"]) == (8, 128)
        new = await admin.set_limits(max_concurrency=3, rate_limit_rpm=600)
        assert new["max_concurrency"] == 3
        assert new["rate_limit_rpm"] == 600
        assert (await admin.get_limits())["max_concurrency"] == 3
        assert await admin.pause() is True
        assert await admin.resume() is False
    finally:
        await admin.aclose()


async def test_bad_value_shows_the_gateways_message(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE)
    admin = AdminClient(gw.url)
    try:
        with pytest.raises(AdminError, match=r"rejected the change \(400\)") as info:
            await admin.set_limits(max_concurrency=0)
        assert "max_concurrency" in str(info.value)
        assert "\n" not in str(info.value)
    finally:
        await admin.aclose()


async def test_wrong_or_missing_token_is_a_401_without_the_token(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, admin_token=TOKEN)
    for token in (None, "wrong-token"):
        admin = AdminClient(gw.url, token)
        try:
            with pytest.raises(AdminError, match="401") as info:
                await admin.set_limits(max_concurrency=4)
            assert TOKEN not in str(info.value)
            assert "wrong-token" not in str(info.value)
        finally:
            await admin.aclose()
    good = AdminClient(gw.url, TOKEN)
    try:
        assert (await good.set_limits(max_concurrency=4))["max_concurrency"] == 4
    finally:
        await good.aclose()


async def test_gateway_down_is_connection_refused() -> None:
    admin = AdminClient(NOWHERE)
    try:
        with pytest.raises(AdminError, match="not answering"):
            await admin.get_limits()
    finally:
        await admin.aclose()


def _standin(serve_app: Callable[[Any], ServerThread]) -> ServerThread:
    async def slow(request: Request) -> Response:
        await asyncio.sleep(2)
        return JSONResponse({})

    async def broken(request: Request) -> Response:
        return PlainTextResponse("Internal Server Error", status_code=500)

    async def html(request: Request) -> Response:
        return PlainTextResponse("<html>proxy login</html>")

    async def notfound(request: Request) -> Response:
        return PlainTextResponse("nope", status_code=404)

    return serve_app(
        Starlette(
            routes=[
                Route("/slow/admin/limits", slow),
                Route("/broken/admin/limits", broken, methods=["GET", "PATCH"]),
                Route("/html/admin/limits", html),
                Route("/nf/admin/limits", notfound),
            ]
        )
    )


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("slow", "did not answer in time"),
        ("broken", "answered 500"),
        ("html", "not a JSON object"),
        ("nf", "no admin API"),
    ],
)
async def test_failures_become_one_line_admin_errors(
    serve_app: Callable[[Any], ServerThread], prefix: str, message: str
) -> None:
    server = _standin(serve_app)
    admin = AdminClient(f"{server.url}/{prefix}", TOKEN, timeout_s=0.3)
    try:
        with pytest.raises(AdminError, match=message) as info:
            await admin.get_limits()
        assert TOKEN not in str(info.value)
    finally:
        await admin.aclose()


async def test_headers_carry_the_token_and_the_source(
    serve_app: Callable[[Any], ServerThread],
) -> None:
    seen: dict[str, str] = {}

    async def limits(request: Request) -> Response:
        seen.update(request.headers)
        return JSONResponse({"max_concurrency": 8})

    server = serve_app(Starlette(routes=[Route("/admin/limits", limits)]))
    admin = AdminClient.from_settings(MonitorSettings(gateway_url=server.url, admin_token=TOKEN))
    assert admin is not None
    try:
        await admin.get_limits()
    finally:
        await admin.aclose()
    assert seen["authorization"] == f"Bearer {TOKEN}"
    assert seen["x-llmtop-source"] == "tui"
    assert AdminClient.from_settings(MonitorSettings(gateway_url=None)) is None


async def test_empty_change_is_refused_locally() -> None:
    admin = AdminClient(NOWHERE)
    try:
        with pytest.raises(AdminError, match="no limit"):
            await admin.set_limits()
    finally:
        await admin.aclose()
