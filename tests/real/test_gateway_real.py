"""The gateway in front of a real vLLM: streams pass through unchanged, disconnects abort.

A client that leaves mid-stream must stop the work in vLLM, not just in the gateway: the gateway
closes its upstream stream and vLLM aborts the request (its token counter stops short of
max_tokens and nothing stays running).

"Unchanged" is checked event by event after dropping what differs between any two vLLM answers
(the request id and the creation time). How tokens are grouped into SSE events depends on how
fast the reader drains them, so the texts are compared joined, and every event's keys, object
type and the final usage are compared as they are.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.vllm_client import MODEL, completion_body, scrape

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(300)]

ABORT = "vllm:request_success_total"


def _events(raw: bytes) -> list[Any]:
    """The SSE data payloads, JSON-decoded ("[DONE]" kept as a string)."""
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith("data: "), block[:200]
        data = block[len("data: ") :]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def _text(events: list[Any], chat: bool) -> str:
    parts = []
    for ev in events:
        if isinstance(ev, dict):
            for c in ev.get("choices") or ():
                parts.append((c.get("delta") or {}).get("content") or "" if chat else c["text"])
    return "".join(parts)


def _shape(ev: Any) -> Any:
    """An event without the per-request id/created and the text (compared joined)."""
    if not isinstance(ev, dict):
        return ev
    out = {k: v for k, v in ev.items() if k not in ("id", "created", "choices")}
    out["choices"] = [
        {
            k: v
            for k, v in c.items()
            if k not in ("text", "delta") and not (k == "finish_reason" and v is None)
        }
        for c in ev.get("choices") or ()
    ]
    return out


def _post_raw(url: str, path: str, body: dict[str, Any]) -> tuple[httpx.Headers, bytes]:
    with httpx.Client(timeout=120.0) as client:
        r = client.post(url + path, json=body)
    assert r.status_code == 200, r.text[:300]
    return r.headers, r.content


def _compare(direct: bytes, proxied: bytes, chat: bool) -> list[Any]:
    a, b = _events(direct), _events(proxied)
    assert a[-1] == b[-1] == "[DONE]"
    assert _text(a, chat) == _text(b, chat)
    assert len(_text(a, chat)) > 0
    final_a = [_shape(e) for e in a if isinstance(e, dict) and e.get("usage")]
    final_b = [_shape(e) for e in b if isinstance(e, dict) and e.get("usage")]
    assert final_a == final_b  # usage, model, object, system_fingerprint
    keys_a = {tuple(sorted(e)) for e in a if isinstance(e, dict)}
    keys_b = {tuple(sorted(e)) for e in b if isinstance(e, dict)}
    assert keys_a == keys_b
    finish_a = [c["finish_reason"] for e in a if isinstance(e, dict) for c in e["choices"]]
    finish_b = [c["finish_reason"] for e in b if isinstance(e, dict) for c in e["choices"]]
    assert [f for f in finish_a if f] == [f for f in finish_b if f] == ["length"]
    return b


def test_streamed_completion_proxied_unchanged(
    idle_vllm: str, start_gateway: Callable[..., ServerThread]
) -> None:
    gw = start_gateway(idle_vllm, max_concurrency=4)
    body = completion_body(200, 64, random.Random(7))
    h_direct, direct = _post_raw(idle_vllm, "/v1/completions", body)
    h_proxied, proxied = _post_raw(gw.url, "/v1/completions", body)
    events = _compare(direct, proxied, chat=False)
    assert h_proxied["content-type"] == h_direct["content-type"]
    assert h_proxied["content-type"].startswith("text/event-stream")
    assert float(h_proxied["x-llmtop-queue-ms"]) >= 0.0
    usage = next(e["usage"] for e in events if isinstance(e, dict) and e.get("usage"))
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (200, 64)
    # Non-streamed too: the same JSON but for id and created.
    plain = {**body, "stream": False}
    plain.pop("stream_options")
    _, a = _post_raw(idle_vllm, "/v1/completions", plain)
    _, b = _post_raw(gw.url, "/v1/completions", plain)
    ja, jb = json.loads(a), json.loads(b)
    for j in (ja, jb):
        j.pop("id")
        j.pop("created")
    assert ja == jb


def test_streamed_chat_completion_proxied_unchanged(
    idle_vllm: str, start_gateway: Callable[..., ServerThread]
) -> None:
    gw = start_gateway(idle_vllm, max_concurrency=4)
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name three prime numbers and say why they are prime."},
        ],
        "max_tokens": 48,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    h_direct, direct = _post_raw(idle_vllm, "/v1/chat/completions", body)
    h_proxied, proxied = _post_raw(gw.url, "/v1/chat/completions", body)
    events = _compare(direct, proxied, chat=True)
    assert h_proxied["content-type"] == h_direct["content-type"]
    first = next(e for e in events if isinstance(e, dict) and e.get("choices"))
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"].get("role") == "assistant"


async def _wait_for(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.25)


async def test_client_disconnect_aborts_the_vllm_request(
    idle_vllm: str, start_gateway: Callable[..., ServerThread]
) -> None:
    gw = start_gateway(idle_vllm, max_concurrency=4)
    before = scrape(idle_vllm)
    aborts0 = before.need(ABORT, finished_reason="abort")
    body = completion_body(100, 1900, random.Random(11))
    got = 0
    async with (
        httpx.AsyncClient(base_url=gw.url, timeout=60.0) as client,
        client.stream("POST", "/v1/completions", json=body) as resp,
    ):
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                got += 1
                if got >= 5:
                    break  # leave mid-stream: the connection closes with the client
    # vLLM stops the request: nothing runs, and the token counter stops short of max_tokens.
    await _wait_for(
        lambda: scrape(idle_vllm).need("vllm:num_requests_running") == 0, 15, "vLLM to stop it"
    )
    settled = scrape(idle_vllm)
    await asyncio.sleep(1.5)
    after = scrape(idle_vllm)
    gen = "vllm:generation_tokens_total"
    assert after.need(gen) == settled.need(gen), "still generating after the disconnect"
    assert 5 <= after.need(gen) - before.need(gen) < 1900  # stopped early, not at max_tokens
    assert after.need(ABORT, finished_reason="length") == before.need(
        ABORT, finished_reason="length"
    )
    # vLLM 0.32 does not count a client's abort in request_success_total: the frontend drops
    # the request's state without recording a finish (AsyncLLM.abort -> OutputProcessor.
    # abort_requests). Newer versions may; either way it is never counted as anything else.
    assert after.need(ABORT, finished_reason="abort") - aborts0 in (0, 1)

    def released() -> bool:
        stats = httpx.get(gw.url + "/admin/stats", timeout=5.0).json()
        return bool(stats["in_flight"] == 0 and stats["queued"] == 0)

    await _wait_for(released, 10, "the gateway to free the slot")
    stats = (await asyncio.to_thread(httpx.get, gw.url + "/admin/stats", timeout=5.0)).json()
    assert stats["outcomes"].get("cancelled", 0) == 1, stats["outcomes"]


async def test_client_leaving_the_gateway_queue_never_reaches_vllm(
    idle_vllm: str, start_gateway: Callable[..., ServerThread]
) -> None:
    gw = start_gateway(idle_vllm, max_concurrency=1)
    before = scrape(idle_vllm)
    rng = random.Random(13)
    first, queued = completion_body(100, 1900, rng), completion_body(150, 50, rng)

    async def gateway_stats(client: httpx.AsyncClient) -> dict[str, Any]:
        stats: dict[str, Any] = (await client.get("/admin/stats")).json()
        return stats

    async with (
        httpx.AsyncClient(base_url=gw.url, timeout=60.0) as admin,
        httpx.AsyncClient(base_url=gw.url, timeout=60.0) as second,
    ):
        async with (
            httpx.AsyncClient(base_url=gw.url, timeout=60.0) as client,
            client.stream("POST", "/v1/completions", json=first) as resp,
        ):
            assert resp.status_code == 200
            lines = resp.aiter_lines()
            while not (await anext(lines)).startswith("data: {"):
                pass  # the first request holds the only slot and is generating
            waiter = asyncio.ensure_future(second.post("/v1/completions", json=queued))
            deadline = time.monotonic() + 10
            while (await gateway_stats(admin))["queued"] != 1:
                assert time.monotonic() < deadline, "the second request never queued"
                await asyncio.sleep(0.1)
            waiter.cancel()  # the client gives up while queued in the gateway
            with pytest.raises(asyncio.CancelledError):
                await waiter
            deadline = time.monotonic() + 10
            while (await gateway_stats(admin))["queued"] != 0:
                assert time.monotonic() < deadline, "the abandoned request stayed queued"
                await asyncio.sleep(0.1)
        # Both gone: the first by disconnecting mid-stream, the second from the queue.
        deadline = time.monotonic() + 15
        while (stats := await gateway_stats(admin))["in_flight"] != 0:
            assert time.monotonic() < deadline, stats
            await asyncio.sleep(0.25)
        assert stats["outcomes"].get("cancelled", 0) == 2, stats["outcomes"]
    await _wait_for(
        lambda: scrape(idle_vllm).need("vllm:num_requests_running") == 0, 15, "vLLM to stop it"
    )
    after = scrape(idle_vllm)
    # Only the first request's 100 prompt tokens ever reached vLLM.
    assert after.need("vllm:prompt_tokens_total") - before.need("vllm:prompt_tokens_total") == 100
