"""Bad input to the proxy, over real sockets: oversized bodies (refused without reading them),
malformed JSON (passed to the engine, which answers its own 400), odd headers (a defined answer
each), and limits at the edge of their ranges followed by traffic. Never a 500 from the gateway.
What passes and what is refused is written down in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.faults import FIGURES, FaultUpstream, Gateway

LIMIT = 64 * 1024


async def ok_json(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    body = b'{"ok": true}'
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()


async def exchange(port: int, head: bytes, body: bytes = b"", read_s: float = 5.0) -> bytes:
    """Send raw bytes, return what comes back until the gateway closes or goes quiet."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        out = b""
        while True:
            try:
                part = await asyncio.wait_for(reader.read(65536), read_s)
            except TimeoutError:
                break
            if not part:
                break
            out += part
            if b"\r\n\r\n" in out and _complete(out):
                break
        return out
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _complete(response: bytes) -> bool:
    head, _, body = response.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return body.endswith(b"0\r\n\r\n")


def status_of(response: bytes) -> int:
    assert response.startswith(b"HTTP/1.1 "), response[:200]
    return int(response.split(b" ", 2)[1])


def post_head(
    path: bytes = b"/v1/completions", extra: bytes = b"", length: int | None = 0
) -> bytes:
    cl = b"content-length: %d\r\n" % length if length is not None else b""
    return b"POST %s HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n%s%s\r\n" % (
        path,
        cl,
        extra,
    )


@pytest.fixture
def echo(
    gateway: Callable[..., Gateway], fault_upstream: Callable[..., FaultUpstream]
) -> tuple[Gateway, FaultUpstream]:
    up = fault_upstream(ok_json)
    return gateway(up.url, max_body_bytes=LIMIT), up


async def test_declared_oversized_body_is_413_before_any_of_it_is_sent(
    echo: tuple[Gateway, FaultUpstream],
) -> None:
    gw, up = echo
    response = await exchange(gw.port, post_head(length=10**12))  # no body follows
    assert status_of(response) == 413
    assert b"max_body_bytes" in response
    assert up.requests == 0
    assert gw.probe.stats()["offered"] == 0
    FIGURES["inputs"] += 1


async def test_chunked_body_over_the_limit_is_cut_off_at_the_limit(
    echo: tuple[Gateway, FaultUpstream],
) -> None:
    gw, up = echo
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(post_head(length=None, extra=b"transfer-encoding: chunked\r\n"))
        chunk = b"x" * 8192
        sent = 0
        while sent <= LIMIT:  # one chunk past the limit, then stop sending and wait
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        await writer.drain()
        response = await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()
    # answered while the body was unfinished: it was never read to the end
    assert status_of(response) == 413
    assert up.requests == 0
    FIGURES["inputs"] += 1


async def test_malformed_json_goes_to_the_engine_which_answers_400(
    start_sim: Callable[..., ServerThread], gateway: Callable[..., Gateway]
) -> None:
    sim = start_sim(profile="fast")
    gw = gateway(sim.url, max_inflight_prompt_tokens=100)  # the budget parses bodies
    bodies = [b"{", b"not json", b"", b'{"prompt": ', b"\xff\xfe", b"[1, 2]", b"null"]
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        for body in bodies:
            r = await c.post(
                "/v1/completions", content=body, headers={"content-type": "application/json"}
            )
            assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
            assert "x-llmtop-queue-ms" in r.headers  # it went through the gateway to the sim
            assert r.json()["error"]["message"]
    s = gw.probe.stats()
    assert s["offered"] == len(bodies)
    assert s["outcomes"]["completed"] == len(bodies)  # the engine answered: not a gateway error
    assert s["in_flight_prompt_tokens"] == 0
    FIGURES["inputs"] += len(bodies)
    FIGURES["requests"] += len(bodies)


ODD_HEADERS: dict[str, tuple[bytes, set[int]]] = {
    # name: (extra header lines, allowed statuses)
    "priority_bogus": (b"x-llmtop-priority: urgent\r\n", {400}),
    "priority_empty": (b"x-llmtop-priority: \r\n", {400}),
    "priority_upper": (b"x-llmtop-priority: HIGH\r\n", {200}),
    "priority_non_ascii": (b"x-llmtop-priority: h\xefgh\r\n", {400}),
    "priority_twice_last_wins": (
        b"x-llmtop-priority: bogus\r\nx-llmtop-priority: low\r\n",
        {200},
    ),
    "priority_twice_last_bad": (
        b"x-llmtop-priority: low\r\nx-llmtop-priority: bogus\r\n",
        {400},
    ),
    "huge_header": (b"x-big: " + b"a" * 100_000 + b"\r\n", {431}),  # over max_header_bytes
    "header_block_1mb": (b"".join(b"x-h%d: %s\r\n" % (i, b"b" * 8000) for i in range(128)), {431}),
    "header_block_48kb": (b"".join(b"x-h%d: %s\r\n" % (i, b"b" * 8000) for i in range(6)), {200}),
    "many_headers": (b"".join(b"x-h%d: v\r\n" % i for i in range(2000)), {200, 400, 431}),
    "utf8_value": (b"x-note: caf\xc3\xa9\r\n", {200}),  # passed through byte for byte
    "latin1_value": (b"x-note: caf\xe9\r\n", {400}),  # not UTF-8: named, not mangled
    "bad_header_name": (b"x b: v\r\n", {400}),
    "control_char_value": (b"x-c: a\x01b\r\n", {400}),
    "tenant_huge": (b"x-llmtop-tenant: " + b"t" * 8000 + b"\r\n", {200}),
    "auth_twice": (b"authorization: Bearer a\r\nauthorization: Bearer b\r\n", {200}),
    "bad_content_length": (b"content-length: abc\r\n", {400}),
}


async def test_odd_headers_have_a_defined_answer(echo: tuple[Gateway, FaultUpstream]) -> None:
    gw, up = echo
    body = b'{"prompt": "hi"}'
    for name, (extra, allowed) in sorted(ODD_HEADERS.items()):
        length = None if name == "bad_content_length" else len(body)
        before = up.requests
        response = await exchange(gw.port, post_head(extra=extra, length=length), body)
        FIGURES["inputs"] += 1
        assert response, f"{name}: the gateway closed without an answer"
        status = status_of(response)
        assert status in allowed, (name, status, response[:300])
        assert gw.probe.stats()["in_flight"] == 0
        if status == 200:
            # passed through byte-exact, x-llmtop-* included (the engine ignores them)
            head, _ = up.seen[-1]
            for line in extra.split(b"\r\n"):
                if line and not line.lower().startswith(b"x-llmtop-priority: bogus"):
                    assert line in head, (name, line[:80])
        elif name.startswith("priority"):
            assert b"x-llmtop-priority must be one of high, normal, low" in response, name
            assert up.requests == before, name
        elif name == "latin1_value":
            assert b"header 'x-note' is not valid UTF-8" in response, response[:300]
            assert up.requests == before, name


EDGE_LIMITS: list[dict[str, Any]] = [
    {"rate_limit_rpm": 5e-324},  # the smallest positive float: rpm/60 underflows to 0
    {"rate_limit_rpm": 1e-320},  # 1/(rpm/60) overflows to inf
    {"rate_limit_rpm": 1e308},
    {"queue_timeout_s": 1e-300, "max_concurrency": 1},
    {"queue_timeout_s": 1e308, "max_queue": 0},
    {"max_concurrency": 2**62, "max_queue": 2**62},
    {"max_inflight_prompt_tokens": 1},
]


async def test_limits_at_the_edges_then_traffic_never_500(
    echo: tuple[Gateway, FaultUpstream],
) -> None:
    gw, _ = echo
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        defaults = (await c.get("/admin/limits")).json()
        for limits in EDGE_LIMITS:
            r = await c.patch("/admin/limits", json=limits)
            assert r.status_code == 200, r.text
            answers = await asyncio.gather(
                *(c.post("/v1/completions", json={"prompt": "x" * 400}) for _ in range(4))
            )
            codes = [a.status_code for a in answers]
            assert set(codes) <= {200, 429}, (limits, [(a.status_code, a.text) for a in answers])
            for a in answers:
                if a.status_code == 429:
                    assert 1 <= int(a.headers["retry-after"]) <= 86_400
                    assert json.loads(a.text)["error"]["reason"]
            assert (await c.patch("/admin/limits", json=defaults)).status_code == 200
            FIGURES["inputs"] += 1
            FIGURES["requests"] += 4


async def test_expect_100_continue_is_answered_here_and_not_forwarded(
    echo: tuple[Gateway, FaultUpstream],
) -> None:
    # curl sends it with larger bodies; the gateway reads the whole body before it forwards, so
    # the upstream must not be asked for a 100 of its own (aiohttp would wait for one)
    gw, up = echo
    body = b'{"prompt": "hi"}'
    head = post_head(extra=b"expect: 100-continue\r\n", length=len(body))
    response = await exchange(gw.port, head, body)
    FIGURES["inputs"] += 1
    final = response.split(b"HTTP/1.1 100 Continue\r\n\r\n")[-1]
    assert status_of(final) == 200, response[:300]
    seen, _ = up.seen[-1]
    assert b"expect" not in seen.lower(), seen


async def test_a_large_but_legal_upstream_header_passes_through(
    gateway: Callable[..., Gateway], fault_upstream: Callable[..., FaultUpstream]
) -> None:
    # 16 KiB in one response header (a long Set-Cookie, a trace header): under the 64 KiB the
    # gateway takes from clients, so it must not become a 502 on the way back
    value = b"v" * 16_384

    async def big_header(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-big: %s\r\n"
            b"content-length: 2\r\nconnection: close\r\n\r\n{}" % value
        )
        await writer.drain()

    gw = gateway(fault_upstream(big_header).url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/completions", json={"prompt": "hi"})
    FIGURES["inputs"] += 1
    assert r.status_code == 200, r.text
    assert r.headers["x-big"] == value.decode()
