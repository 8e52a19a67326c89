"""The sim as a real server on 127.0.0.1: streaming, errors, aborts, KV exhaustion, metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.sim.model import Engine

StartSim = Callable[..., ServerThread]


def samples(text: str) -> dict[str, float]:
    """Sample name with sorted labels -> value."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def sse_events(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]


def engine_of(server: ServerThread) -> Engine:
    app: Any = server._server.config.app
    engine: Engine = app.state.engine
    return engine


def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_streams_a_completion_over_loopback(start_sim: StartSim) -> None:
    server = start_sim(profile="fast", model_name="tinyllm")
    body = {
        "model": "tinyllm",
        "prompt": list(range(300)),
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    with (
        httpx.Client(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/v1/completions", json=body) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        arrivals = []
        text = ""
        for chunk in r.iter_text():
            arrivals.append(time.monotonic())
            text += chunk
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    tokens, usage = chunks[:-1], chunks[-1]
    assert len(tokens) == 12  # one token per chunk
    assert len(arrivals) > 2  # streamed, not buffered
    for c in tokens:
        assert c["object"] == "text_completion"
        assert c["model"] == "tinyllm"
        assert set(c["choices"][0]) == {
            "index", "text", "logprobs", "finish_reason", "stop_reason",
            "prompt_token_ids", "token_ids",
        }  # fmt: skip
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 11 + ["length"]
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 300,
        "total_tokens": 312,
        "completion_tokens": 12,
        "prompt_tokens_details": None,
    }
    metrics = samples(httpx.get(f"{server.url}/metrics").text)
    assert metrics["vllm:prompt_tokens_total{engine=0}"] == 300
    assert metrics["vllm:generation_tokens_total{engine=0}"] == 12
    assert metrics["vllm:request_success_total{engine=0,finished_reason=length}"] == 1
    assert metrics["vllm:time_to_first_token_seconds_count{engine=0}"] == 1


def test_chat_streams_and_plain_responses(start_sim: StartSim) -> None:
    server = start_sim(profile="fast")
    with httpx.Client(base_url=server.url, timeout=10) as client:
        messages = [{"role": "user", "content": "x" * 40}]
        r = client.post(
            "/v1/chat/completions",
            json={"messages": messages, "max_tokens": 4, "stream": True},
        )
        events = sse_events(r.text)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * 4
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all("content" in c["choices"][0]["delta"] for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"

        whole = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 5})
        assert whole.status_code == 200
        data = whole.json()
        assert data["object"] == "chat.completion"
        assert data["usage"]["prompt_tokens"] == 3 + 4 + 10  # header + template + 40 chars / 4
        assert data["usage"]["completion_tokens"] == 5

        plain = client.post("/v1/completions", json={"prompt": "abcdefgh", "max_tokens": 3})
        assert plain.json()["choices"][0]["finish_reason"] == "length"
        assert plain.json()["usage"]["prompt_tokens"] == 2

        models = client.get("/v1/models").json()
        assert models["data"][0]["id"] == "llmtop-sim"
        assert models["data"][0]["max_model_len"] == 2048
        assert client.get("/health").status_code == 200
        assert client.get("/health").content == b""
        assert client.get("/version").json() == {"version": "0.32.0"}


def test_errors_have_vllm_shape(start_sim: StartSim) -> None:
    server = start_sim(profile="fast", max_model_len=1024)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        bad = client.post(
            "/v1/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "BadRequestError"
        assert bad.json()["error"]["code"] == 400

        unknown = client.post("/v1/completions", json={"model": "gpt-9", "prompt": "hi"})
        assert unknown.status_code == 404
        assert "gpt-9" in unknown.json()["error"]["message"]
        assert unknown.json()["error"]["param"] == "model"

        long = client.post("/v1/completions", json={"prompt": [1] * 1025, "max_tokens": 1})
        assert long.status_code == 400
        assert "maximum context length is 1024" in long.json()["error"]["message"]

        too_many = client.post("/v1/completions", json={"prompt": [1] * 1000, "max_tokens": 100})
        assert too_many.status_code == 400
    assert not engine_of(server).has_work()


def test_disconnect_mid_stream_aborts_and_frees_blocks(start_sim: StartSim) -> None:
    server = start_sim(profile="fast")
    engine = engine_of(server)
    body = {"prompt": [7] * 500, "max_tokens": 1500, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/v1/completions", json=body) as r,
    ):
        held = []
        for got, _ in enumerate(r.iter_text(), start=1):
            held.append(engine.config.num_gpu_blocks - engine.free_blocks)
            if got >= 3:
                break
        assert min(held) >= 500 // 16  # the prompt's blocks, while streaming
    assert wait_until(lambda: engine.stats.finished["abort"] == 1)
    assert wait_until(lambda: engine.free_blocks == engine.config.num_gpu_blocks)
    assert not engine.has_work()
    text = httpx.get(f"{server.url}/metrics").text
    assert samples(text)["vllm:request_success_total{engine=0,finished_reason=abort}"] == 1


def test_disconnect_while_waiting_for_a_whole_response_aborts(start_sim: StartSim) -> None:
    server = start_sim(profile="fast")
    engine = engine_of(server)
    with (
        httpx.Client(base_url=server.url, timeout=0.3) as client,
        pytest.raises(httpx.ReadTimeout),  # the client gives up and hangs up
    ):
        client.post("/v1/completions", json={"prompt": [1] * 100, "max_tokens": 1500})
    assert wait_until(lambda: engine.stats.finished["abort"] == 1)
    assert wait_until(lambda: engine.free_blocks == engine.config.num_gpu_blocks)


def test_concurrent_streams_exhaust_the_kv_cache(start_sim: StartSim) -> None:
    server = start_sim(profile="fast")
    engine = engine_of(server)
    peak = {"waiting": 0, "kv": 0.0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak["waiting"] = max(peak["waiting"], len(engine.waiting))
            peak["kv"] = max(peak["kv"], engine.kv_cache_usage)
            time.sleep(0.005)

    def one(i: int, results: list[int]) -> None:
        body = {"prompt": [i] * 600, "max_tokens": 150, "stream": True}
        with httpx.Client(base_url=server.url, timeout=20) as client:
            r = client.post("/v1/completions", json=body)
            results.append(len(sse_events(r.text)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    results: list[int] = []
    threads = [threading.Thread(target=one, args=(i, results)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stop.set()
    watcher.join()
    assert results == [151] * 8  # 150 tokens and [DONE], every one: no errors
    m = samples(httpx.get(f"{server.url}/metrics").text)
    assert m["vllm:num_preemptions_total{engine=0}"] > 0
    assert m["vllm:request_success_total{engine=0,finished_reason=length}"] == 8
    assert m["vllm:prompt_tokens_total{engine=0}"] == 8 * 600
    assert m["vllm:kv_cache_usage_perc{engine=0}"] == 0.0
    assert m["vllm:num_requests_running{engine=0}"] == 0
    assert peak["kv"] > 0.9
    assert peak["waiting"] > 0


def test_native_admission_limit_answers_503(start_sim: StartSim) -> None:
    server = start_sim(profile="fast", max_num_seqs=1, max_num_queued_reqs=1)
    engine = engine_of(server)
    queued: list[int] = []

    def waiter() -> None:
        body = {"prompt": [1] * 10, "max_tokens": 2}
        with httpx.Client(base_url=server.url, timeout=20) as c:
            queued.append(c.post("/v1/completions", json=body).status_code)

    with httpx.Client(base_url=server.url, timeout=20) as client:
        long = {"prompt": [1] * 100, "max_tokens": 1900, "stream": True}
        with client.stream("POST", "/v1/completions", json=long) as running:
            chunks = running.iter_text()  # keep it referenced: closing it hangs up
            next(chunks)  # it holds the only seat
            second = threading.Thread(target=waiter)
            second.start()
            assert wait_until(lambda: len(engine.waiting) == 1)
            refused = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == 503
        second.join(20)  # the stream closed: aborted, the queued one runs
    assert queued == [200]
    m = samples(httpx.get(f"{server.url}/metrics").text)
    assert m["vllm:admission_rejections_total{reason=max_num_queued_reqs}"] == 1
    assert m["vllm:request_success_total{engine=0,finished_reason=abort}"] == 1


def test_dcgm_telemetry_follows_the_load(start_sim: StartSim) -> None:
    server = start_sim(profile="fast")

    def dcgm() -> dict[str, float]:
        text = httpx.get(f"{server.url}/dcgm/metrics").text
        return {f.name: f.samples[0].value for f in text_string_to_metric_families(text)}

    idle = dcgm()
    assert idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle["DCGM_FI_DEV_FB_USED"] > 0
    assert idle["DCGM_FI_DEV_FB_FREE"] > 0
    with httpx.Client(base_url=server.url, timeout=20) as client:
        body = {"prompt": [1] * 64, "max_tokens": 300, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as r:
            started = time.monotonic()
            busy: dict[str, float] = {}
            for _ in r.iter_text():
                if time.monotonic() - started > 1.1 and not busy:
                    busy = dcgm()
    assert busy, "the request should stream for more than a second"
    assert busy["DCGM_FI_DEV_GPU_UTIL"] > 30  # loose: the box may starve the server
    # Decode is memory-bound: most of a step is moving bytes (the rest is fixed overhead).
    assert busy["DCGM_FI_DEV_MEM_COPY_UTIL"] > 0.4 * busy["DCGM_FI_DEV_GPU_UTIL"]
    assert busy["DCGM_FI_DEV_POWER_USAGE"] > idle["DCGM_FI_DEV_POWER_USAGE"]
    assert busy["DCGM_FI_DEV_SM_CLOCK"] > idle["DCGM_FI_DEV_SM_CLOCK"]


async def test_128_concurrent_streams_all_complete(start_sim: StartSim) -> None:
    server = start_sim(profile="fast", kv_tokens=16384, max_model_len=2048)
    limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
    async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:

        async def one(i: int) -> int:
            body = {"prompt": [i] * 32, "max_tokens": 16, "stream": True}
            async with client.stream("POST", "/v1/completions", json=body) as r:
                return sum([1 async for line in r.aiter_lines() if line.startswith("data: {")])

        counts = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(128))), 60)
        m = samples((await client.get("/metrics")).text)
    assert counts == [16] * 128
    assert m["vllm:request_success_total{engine=0,finished_reason=length}"] == 128
    assert m["vllm:generation_tokens_total{engine=0}"] == 128 * 16
    # Continuous batching: far fewer steps than one request at a time would take.
    assert m["vllm:iteration_tokens_total_count{engine=0}"] < 128 * 16 / 4
