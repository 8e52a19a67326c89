"""Purpose-built upstreams and stats helpers for the gateway's integration tests (no tests here)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class FakeUpstream:
    """An OpenAI-ish SSE upstream; each request's JSON body picks its behaviour:
    tag (recorded in arrival order), chunks, hold_after (chunks sent before waiting on the
    gate), hang (never answers), status (answer with that status), think_s (a pause before
    the headers and before each chunk), linger_s (a pause after `data: [DONE]` before the
    stream ends, as vLLM's server can leave between its last event and the end of the body),
    split_done (`data: [DONE]` sent in two writes 50 ms apart)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.arrivals: list[str] = []
        self.active = 0
        self.aborted = 0
        self.completed = 0

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/echo":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            extra = [(b"keep-alive", b"timeout=5"), (b"x-up", b"1"), (b"set-cookie", b"s=user1")]
            await _json(send, 200, headers, extra)
            return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["path"] == "/v1/models":
            await _json(send, 200, {"object": "list", "data": [{"id": "fake"}]})
            return
        opts = json.loads(body or b"{}")
        self.arrivals.append(str(opts.get("tag", "")))
        work = asyncio.ensure_future(self._answer(opts, send))
        watcher = asyncio.ensure_future(receive())
        self.active += 1
        try:
            await asyncio.wait((work, watcher), return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                self.aborted += 1
                work.cancel()
            else:
                self.completed += 1
        finally:
            self.active -= 1
            watcher.cancel()

    async def _answer(self, opts: dict[str, Any], send: Send) -> None:
        if opts.get("hang"):
            await asyncio.sleep(60)
        if "status" in opts:
            await _json(send, opts["status"], {"detail": "boom"})
            return
        think_s = float(opts.get("think_s", 0.0))
        if think_s:
            await asyncio.sleep(think_s)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for i in range(int(opts.get("chunks", 3))):
            if i == opts.get("hold_after", -1):
                # the gate is a threading.Event set from the test's thread: poll it
                while not self.gate.is_set():  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
            if think_s:
                await asyncio.sleep(think_s)
            chunk = f'data: {{"i": {i}}}\n\n'.encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        linger_s = float(opts.get("linger_s", 0.0))
        if opts.get("split_done"):  # the last event in two writes, as two reads downstream
            await send({"type": "http.response.body", "body": b"data: [DO", "more_body": True})
            await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": b"NE]\n\n", "more_body": True})
        else:
            await send(
                {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True}
            )
        if linger_s:
            await asyncio.sleep(linger_s)
        await send({"type": "http.response.body", "body": b""})


async def _json(
    send: Send, status: int, obj: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps(obj).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RawUpstream:
    """A socket server that answers every request with fixed bytes, then resets the
    connection: an upstream dying mid-stream, or one speaking garbage."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    part = conn.recv(65536)
                    if not part:
                        break
                    data += part
                conn.sendall(self.reply)
                time.sleep(0.2)  # let the peer read the reply before the reset discards it
                # RST instead of FIN: the peer sees a reset
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self.sock.close()


def fake_upstream(
    serve_app: Callable[[Any], ServerThread],
) -> Iterator[tuple[FakeUpstream, str]]:
    """Body of the `upstream` fixture: a FakeUpstream served on 127.0.0.1, its gate opened at
    teardown so no request is left holding."""
    fake = FakeUpstream()
    server = serve_app(fake)
    yield fake, server.url
    fake.gate.set()


async def stats(c: httpx.AsyncClient) -> dict[str, Any]:
    r = await c.get("/admin/stats")
    assert r.status_code == 200
    data: dict[str, Any] = r.json()
    return data


async def wait_stats(
    c: httpx.AsyncClient, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 10.0
) -> dict[str, Any]:
    """Poll /admin/stats until `pred` holds (bounded), and return the stats that satisfied it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        s = await stats(c)
        if pred(s):
            return s
        assert loop.time() < deadline, f"condition not reached; last stats: {s}"
        await asyncio.sleep(0.01)


async def wait_until(pred: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def accounted(s: dict[str, Any]) -> None:
    assert s["offered"] == sum(s["outcomes"].values()) + s["in_flight"] + s["queued"]
    assert s["outcomes"]["rejected"] == sum(s["rejections"].values())


def gen(tag: str = "", **opts: Any) -> dict[str, Any]:
    return {"model": "fake", "prompt": "hello", "stream": True, "tag": tag, **opts}
