"""engine_priority: the gateway stamps vLLM's `priority` from the priority a request runs at."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from llmtop.gateway.server.engine_priority import stamp
from tests.support.gateway_sim import Start


def test_stamp_sets_overwrites_and_leaves_non_objects() -> None:
    assert json.loads(stamp(b'{"prompt": "x"}', "low")) == {"prompt": "x", "priority": 1}
    assert json.loads(stamp(b'{"priority": -100}', "normal")) == {"priority": 0}
    assert json.loads(stamp(b'{"priority": 5}', "high")) == {"priority": -1}
    for body in (b"[1, 2]", b"not json", b"\xff"):
        assert stamp(body, "high") == body


@pytest.mark.parametrize("on", [True, False])
async def test_the_engine_sees_the_gateway_priority(
    on: bool, start_gateway: Start, serve_app: Start
) -> None:
    seen: list[dict[str, object]] = []

    async def completions(request: Request) -> JSONResponse:
        seen.append(json.loads(await request.body()))
        return JSONResponse({"choices": [{"text": "ok"}]})

    upstream = serve_app(
        Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    )
    gw = start_gateway(upstream.url, engine_priority=on)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        # no key table: a client may ask for less than normal, and a claim above it is clamped
        for prio in ("low", "high"):
            r = await c.post(
                "/v1/completions",
                json={"prompt": "x", "priority": -100},
                headers={"x-llmtop-priority": prio},
            )
            assert r.status_code == 200
    if on:
        assert [b["priority"] for b in seen] == [1, 0]
    else:
        assert [b["priority"] for b in seen] == [-100, -100]
