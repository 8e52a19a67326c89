"""The gateway when the upstream fails: killed mid-stream (a real `llmtop sim` process, SIGKILL),
hanging before and after its headers, garbage, protocol errors and 5xx. Every client gets a
defined answer (a clean error or a terminated stream, never a 500 from the gateway), and after
each fault the gateway is back at rest: nothing in flight or queued, every request counted
once, no task or socket left behind (tests/support/faults.py `assert_recovered`).

tests/integration/test_gateway_proxy.py checks one request per fault; these run several at
once, some queued behind the failing ones, and add the leak check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.faults import (
    FIGURES,
    SSE_HEAD,
    Fault,
    FaultUpstream,
    Gateway,
    assert_recovered,
    baseline,
    reset,
    sse_chunk,
    wait_for,
)

BODY = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 16, "stream": True}
TERMINATED = '"type": "upstream_error"'


def classify(status: int, body: bytes) -> str:
    """What the client got: ok, terminated (a 200 stream ended by an error event), or the
    status of an OpenAI-shaped error. Anything else fails the test."""
    text = body.decode("utf-8", "replace")
    if status == 200:
        assert text.endswith("data: [DONE]\n\n"), text[-200:]
        return "terminated" if TERMINATED in text else "ok"
    assert status in (429, 502, 504), (status, text)
    err = json.loads(text)["error"]
    assert err["message"], err
    assert err["type"], err
    return str(status)


async def send_all(
    gw: Gateway, n: int, timeout_s: float = 20.0, body: dict[str, Any] | None = None
) -> list[str]:
    """n concurrent streaming requests through the gateway; each must get a defined answer."""

    async def one(c: httpx.AsyncClient) -> str:
        async with c.stream("POST", "/v1/completions", json=body or BODY) as r:
            try:
                data = b"".join([chunk async for chunk in r.aiter_raw()])
            except httpx.RemoteProtocolError:
                # a body that is not a stream of events, cut by the upstream: the connection
                # closes without the last chunk, so the client knows it is incomplete
                assert r.status_code == 200
                assert "event-stream" not in r.headers["content-type"]
                return "cut"
            return classify(r.status_code, data)

    async with httpx.AsyncClient(base_url=gw.url, timeout=timeout_s) as c:
        results = await asyncio.gather(*(one(c) for _ in range(n)), return_exceptions=True)
    FIGURES["requests"] += n
    lost = [r for r in results if isinstance(r, BaseException)]
    FIGURES["lost"] += len(lost)
    assert not lost, lost
    return [str(r) for r in results]


# ---- faults, one script each -----------------------------------------------------------------


async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def stall_mid_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD + sse_chunk(0))
    await writer.drain()
    await asyncio.sleep(3600)


async def reset_mid_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD + sse_chunk(0) + sse_chunk(1))
    await writer.drain()
    await asyncio.sleep(0.05)
    reset(writer)


async def drip_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD)
    for i in range(3):
        writer.write(sse_chunk(i))
        await writer.drain()
        await asyncio.sleep(0.02)
    # FIN without the last chunk: a clean close that still cuts the stream


def fixed(reply: bytes) -> Fault:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(reply)
        await writer.drain()
        await asyncio.sleep(0.05)

    return answer


async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    return


FAULTS: dict[str, tuple[Fault, set[str]]] = {
    # name: (the upstream's behaviour, the answers a client may get)
    "hang_before_headers": (hang, {"504"}),
    "stall_mid_stream": (stall_mid_stream, {"terminated"}),
    "reset_mid_stream": (reset_mid_stream, {"terminated"}),
    "drip_then_close": (drip_then_close, {"terminated"}),
    "close_without_reply": (close_at_once, {"502"}),
    "garbage": (fixed(bytes(range(256)) * 4), {"502"}),
    "bad_status_line": (fixed(b"HTTP/1.1 abc\r\n\r\n"), {"502"}),
    # head and bad chunk in one packet: a parser that reads both at once fails before the
    # client gets headers (502); one that hands over the head first ends the stream instead
    "bad_chunk_size": (fixed(SSE_HEAD + b"zz\r\ndata: x\r\n"), {"502", "terminated"}),
    "huge_header": (fixed(b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n"), {"502"}),
    "html_500": (
        fixed(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\n"
            b"content-length: 27\r\n\r\n<html><h1>oops</h1></html>\n"
        ),
        {"502"},
    ),
    "empty_503": (fixed(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"), {"502"}),
    "json_cut_short": (
        fixed(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n"
            b'\r\n{"id": "cmpl-1", "choices": [{"te'
        ),
        {"cut"},
    ),
    "5xx_cut_short": (
        fixed(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 1000\r\n\r\npartial"),
        {"502"},
    ),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
async def test_upstream_fault_gives_defined_answers_and_leaves_nothing_behind(
    name: str,
    gateway: Callable[..., Gateway],
    fault_upstream: Callable[[Fault], FaultUpstream],
) -> None:
    fault, allowed = FAULTS[name]
    up = fault_upstream(fault)
    gw = gateway(up.url, max_concurrency=2, max_queue=16, upstream_read_timeout_s=0.5)
    await wait_for(lambda: gw.probe.loop is not None, what="gateway loop known")
    base = baseline(gw.probe, (up.port,))
    # 6 at once with 2 slots: 4 wait in the queue behind the failing ones
    answers = await send_all(gw, 6)
    assert set(answers) <= allowed, answers
    s = await assert_recovered(gw.probe, base, gw.port, (up.port,))
    assert s["offered"] == 6
    assert s["outcomes"]["upstream_error"] == 6
    assert s["upstream"]["healthy"] is False
    assert s["upstream"]["last_error"]
    # a connection the fault closes late may take a second request first (also a 502)
    assert 1 <= up.requests <= 6


async def test_upstream_that_never_accepts_is_a_connect_timeout(
    gateway: Callable[..., Gateway],
) -> None:
    # a listener that never accepts, its backlog already full: new connects hang in SYN
    with socket.create_server(("127.0.0.1", 0), backlog=0) as listener:
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        try:
            gw = gateway(f"http://127.0.0.1:{port}", max_concurrency=2,
                         upstream_connect_timeout_s=0.3)  # fmt: skip
            base = baseline(gw.probe)
            answers = await send_all(gw, 4)
            assert answers == ["504"] * 4, answers
            s = await assert_recovered(gw.probe, base, gw.port)
            assert s["outcomes"]["upstream_error"] == 4
        finally:
            for f in fillers:
                f.close()


async def test_queue_timeouts_fire_while_the_whole_upstream_hangs(
    gateway: Callable[..., Gateway],
    fault_upstream: Callable[..., FaultUpstream],
) -> None:
    # /health hangs too: the gateway's health probe must not hold up the queue's clock
    up = fault_upstream(hang, answer_health=False)
    gw = gateway(up.url, max_concurrency=1, queue_timeout_s=0.3, upstream_read_timeout_s=5.0)
    base = baseline(gw.probe, (up.port,))
    async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
        stuck = asyncio.ensure_future(c.post("/v1/completions", json=BODY))
        await wait_for(lambda: gw.probe.stats()["in_flight"] == 1, what="one in flight")
        waits = []
        for _ in range(3):
            late = await c.post("/v1/completions", json=BODY)
            assert late.status_code == 429, late.text
            err = late.json()["error"]
            assert err["reason"] == "queue_timeout"
            waits.append(float(err["message"].split("waited ")[1].split("s")[0]))
        assert (await stuck).status_code == 504
    FIGURES["requests"] += 4
    # 0.3 s plus a tick, not the upstream's 5 s: a bound far from both, for a noisy 2-core box
    assert max(waits) < 2.5, waits
    s = await assert_recovered(gw.probe, base, gw.port, (up.port,))
    assert s["outcomes"]["timed_out"] == 3


# ---- a real engine process killed mid-stream ---------------------------------------------------


def start_sim_process(port: int = 0) -> tuple[subprocess.Popen[str], str]:
    """`llmtop sim` in its own process (on a free port by default); returns it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "sim", "--port", str(port), "--profile", "fast"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        proc.wait()
        pytest.fail(f"llmtop sim did not start: {line!r}")
    return proc, line[line.index("http://") :].split()[0]


async def test_engine_killed_mid_stream_then_back(
    gateway: Callable[..., Gateway],
) -> None:
    proc, url = await asyncio.to_thread(start_sim_process)
    try:
        gw = gateway(url, max_concurrency=3, max_queue=16, upstream_connect_timeout_s=2.0)
        await wait_for(lambda: gw.probe.loop is not None, what="gateway loop known")
        base = baseline(gw.probe)
        long = {**BODY, "max_tokens": 1000}
        async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
            streams = []
            for _ in range(3):
                cm = c.stream("POST", "/v1/completions", json=long)
                r = await cm.__aenter__()
                assert r.status_code == 200
                chunks = r.aiter_raw()
                first = await asyncio.wait_for(chunks.__anext__(), 10)
                streams.append((cm, r, chunks, first))
            queued = [asyncio.ensure_future(c.post("/v1/completions", json=long)) for _ in range(3)]
            await wait_for(lambda: gw.probe.stats()["queued"] == 3, what="3 queued")
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 10)
            answers = []
            for cm, r, chunks, first in streams:
                rest = b"".join([chunk async for chunk in chunks])
                answers.append(classify(r.status_code, first + rest))
                await cm.__aexit__(None, None, None)
            for q in await asyncio.gather(*queued):
                answers.append(classify(q.status_code, q.content))
        FIGURES["requests"] += 6
        assert answers[:3] == ["terminated"] * 3
        assert answers[3:] == ["502"] * 3  # admitted after the kill: connection refused
        s = await assert_recovered(gw.probe, base, gw.port)
        assert s["outcomes"]["upstream_error"] == 6
        # the engine comes back on the same port: the very next requests go through
        if proc.stdout is not None:
            proc.stdout.close()
        proc, _ = await asyncio.to_thread(start_sim_process, int(url.rsplit(":", 1)[1]))
        answers = await send_all(gw, 3)
        assert answers == ["ok"] * 3
        s = await assert_recovered(gw.probe, base, gw.port)
        assert s["outcomes"]["completed"] == 3
        assert s["upstream"]["healthy"] is True
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
