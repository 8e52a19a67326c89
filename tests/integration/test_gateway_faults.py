"""The gateway against failing upstreams: refused, hung, 5xx, reset mid-stream, garbage."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.gateway_fakes import (
    FakeUpstream,
    RawUpstream,
    accounted,
    fake_upstream,
    gen,
    wait_stats,
    wait_until,
)


@pytest.fixture
def upstream(serve_app: Callable[[Any], ServerThread]) -> Iterator[tuple[FakeUpstream, str]]:
    yield from fake_upstream(serve_app)


async def test_upstream_refused_is_502_and_counted(
    start_gateway: Callable[..., ServerThread],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        dead = f"http://127.0.0.1:{listener.getsockname()[1]}"
    gw = start_gateway(dead)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen())
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    assert s["outcomes"]["upstream_error"] == 1
    assert s["upstream"]["healthy"] is False
    assert "unreachable" in s["upstream"]["last_error"]
    accounted(s)


async def test_upstream_hung_is_504(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url, upstream_read_timeout_s=0.3)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen(hang=True))
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 504
    assert r.json()["error"]["code"] == 504
    assert s["outcomes"]["upstream_error"] == 1


async def test_upstream_5xx_is_an_openai_502(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    _, url = upstream
    gw = start_gateway(url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen(status=500))
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 502
    err = r.json()["error"]
    assert err["upstream_status"] == 500
    assert "boom" in err["message"]
    assert s["outcomes"]["upstream_error"] == 1


async def test_upstream_reset_mid_stream_ends_the_stream_cleanly(
    start_gateway: Callable[..., ServerThread],
) -> None:
    raw = RawUpstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
        b'f\r\ndata: {"i":0}\n\n\r\n'
    )
    try:
        gw = start_gateway(raw.url)
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
            r = await c.post("/v1/completions", json=gen())
            s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    finally:
        raw.close()
    assert r.status_code == 200  # headers were already out
    assert r.text.startswith('data: {"i":0}')
    assert '"type": "upstream_error"' in r.text
    assert r.text.endswith("data: [DONE]\n\n")
    assert s["outcomes"]["upstream_error"] == 1
    accounted(s)


async def test_upstream_garbage_is_502(start_gateway: Callable[..., ServerThread]) -> None:
    raw = RawUpstream(b"this is not http\r\n\r\n")
    try:
        gw = start_gateway(raw.url)
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
            r = await c.post("/v1/completions", json=gen())
    finally:
        raw.close()
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"


async def test_upstream_silent_mid_stream_ends_the_stream_cleanly(
    upstream: tuple[FakeUpstream, str], start_gateway: Callable[..., ServerThread]
) -> None:
    fake, url = upstream
    gw = start_gateway(url, upstream_read_timeout_s=0.3)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json=gen(hold_after=1))  # the gate stays shut
        s = await wait_stats(c, lambda s: s["in_flight"] == 0)
    assert r.status_code == 200
    assert r.text.startswith('data: {"i": 0}')
    assert "ReadTimeout" in r.text
    assert r.text.endswith("data: [DONE]\n\n")
    assert s["outcomes"]["upstream_error"] == 1
    assert s["upstream"]["healthy"] is False
    await wait_until(lambda: fake.aborted == 1)  # and the upstream request was closed
