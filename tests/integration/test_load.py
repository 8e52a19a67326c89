"""The load generator against real servers on 127.0.0.1: a scripted OpenAI-style streamer whose
timings are known, and the CLI's bounds and errors."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.errors import TargetError
from llmtop.load.drivers import ClosedLoop, OpenLoop, stop_after
from llmtop.load.runner import Runner, Shape
from llmtop.load.stats import Slo, summarize


def scripted_app(
    ttft_s: float = 0.15, gap_s: float = 0.02, reject_first: int = 0, retry_after: str = "0.3"
) -> tuple[Starlette, dict[str, Any]]:
    """A streamer: first token after ttft_s, then one every gap_s; the first `reject_first`
    requests get a 429 with Retry-After. `seen` records what clients sent."""
    seen: dict[str, Any] = {"bodies": [], "headers": [], "count": 0}

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted"}]})

    async def completions(request: Request) -> Response:
        body = await request.json()
        seen["bodies"].append(body)
        seen["headers"].append(dict(request.headers))
        seen["count"] += 1
        if seen["count"] <= reject_first:
            return JSONResponse(
                {"error": {"message": "queue full", "reason": "queue_full"}},
                status_code=429,
                headers={"retry-after": retry_after},
            )
        n = int(body["max_tokens"])
        chat = "messages" in body
        prompt_len = (
            len(body["prompt"]) if not chat else len(body["messages"][0]["content"].split())
        )

        async def stream() -> AsyncIterator[bytes]:
            await asyncio.sleep(ttft_s)
            for i in range(n):
                if i:
                    await asyncio.sleep(gap_s)
                choice: dict[str, Any] = (
                    {"index": 0, "delta": {"content": "x"}} if chat else {"index": 0, "text": "x"}
                )
                yield f"data: {json.dumps({'choices': [choice]})}\n\n".encode()
            usage = {"prompt_tokens": prompt_len, "completion_tokens": n}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", completions, methods=["POST"]),
        ]
    )
    return app, seen


async def test_closed_loop_measures_ttft_itl_and_sends_exact_prompts(
    serve_app: Callable[[Any], ServerThread],
) -> None:
    app, seen = scripted_app(ttft_s=0.15, gap_s=0.02)
    server = serve_app(app)
    async with Runner(server.url, max_requests=8, max_connections=4) as runner:
        assert await runner.resolve_model() == "scripted"
        loop = ClosedLoop(runner, Shape(prompt_tokens=(50, 60), output_tokens=5, priority="low"), 4)
        await asyncio.wait_for(loop.wait(), 20)
    s = summarize(runner.results, runner.elapsed(), Slo(ttft_s=2.0, itl_s=0.5))
    assert (s.offered, s.ok, s.good) == (8, 8, 8)
    assert s.output_tokens == 40
    assert s.ttft.p50 is not None
    assert 0.15 <= s.ttft.p50 < 1.0
    assert s.itl.count == 8 * 4
    assert s.itl.p50 is not None
    assert 0.02 <= s.itl.p50 < 0.5
    for body, headers in zip(seen["bodies"], seen["headers"], strict=True):
        assert 50 <= len(body["prompt"]) <= 60
        assert all(isinstance(t, int) for t in body["prompt"])
        assert body["max_tokens"] == 5
        assert body["ignore_eos"] is True
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert headers["x-llmtop-priority"] == "low"
    assert {r.prompt_tokens for r in runner.results} <= set(range(50, 61))


async def test_chat_requests_use_chat_route(serve_app: Callable[[Any], ServerThread]) -> None:
    app, seen = scripted_app(ttft_s=0.01, gap_s=0.0)
    server = serve_app(app)
    async with Runner(server.url, max_requests=2) as runner:
        await runner.resolve_model()
        await ClosedLoop(
            runner, Shape(prompt_tokens=(20, 20), output_tokens=3, chat=True), 1
        ).wait()
    assert [r.outcome for r in runner.results] == ["ok", "ok"]
    assert all(r.output_tokens == 3 and r.ttft_s is not None for r in runner.results)
    assert seen["bodies"][0]["messages"][0]["role"] == "user"


async def test_429_is_recorded_and_retry_after_honoured(
    serve_app: Callable[[Any], ServerThread],
) -> None:
    app, _ = scripted_app(ttft_s=0.01, gap_s=0.0, reject_first=2, retry_after="0.3")
    server = serve_app(app)
    async with Runner(server.url, max_requests=1, retry_429=True) as runner:
        await runner.resolve_model()
        await ClosedLoop(runner, Shape(prompt_tokens=(5, 5), output_tokens=2), 1).wait()
    (r,) = runner.results
    assert r.outcome == "ok"
    assert (r.rejections, r.retry_after_given, r.retry_after_honoured) == (2, 2, 2)
    assert r.reject_reason == "queue_full"
    assert r.ttft_s is not None
    assert r.ttft_s >= 0.6


async def test_429_without_retry_is_a_rejection(serve_app: Callable[[Any], ServerThread]) -> None:
    app, _ = scripted_app(reject_first=1)
    server = serve_app(app)
    async with Runner(server.url, max_requests=1) as runner:
        await runner.resolve_model()
        await ClosedLoop(runner, Shape(prompt_tokens=(5, 5), output_tokens=2), 1).wait()
    s = summarize(runner.results, runner.elapsed(), Slo())
    assert (s.rejected, s.rejections_429, s.retry_after_honoured, s.good) == (1, 1, 0, 0)
    assert s.status_codes == {"429": 1}
    assert s.reject_reasons == {"queue_full": 1}


async def test_duration_cuts_requests_in_flight(serve_app: Callable[[Any], ServerThread]) -> None:
    app, _ = scripted_app(ttft_s=10.0)
    server = serve_app(app)
    async with Runner(server.url, max_requests=100) as runner:
        await runner.resolve_model()
        runner.mark_start()
        timer = asyncio.ensure_future(stop_after(runner, 0.5))
        await asyncio.wait_for(ClosedLoop(runner, Shape(output_tokens=2), 3).wait(), 10)
        await timer
    assert [r.outcome for r in runner.results] == ["cut"] * 3
    assert runner.elapsed() < 5
    assert runner.in_flight == 0


async def test_open_loop_offers_at_the_rate(serve_app: Callable[[Any], ServerThread]) -> None:
    app, _ = scripted_app(ttft_s=0.01, gap_s=0.0)
    server = serve_app(app)
    async with Runner(server.url, max_requests=10, max_connections=100) as runner:
        await runner.resolve_model()
        runner.mark_start()
        await asyncio.wait_for(
            OpenLoop(runner, Shape(output_tokens=2), rate_per_s=50.0, burstiness=1.0).run(), 20
        )
    assert len(runner.results) == 10
    assert all(r.outcome == "ok" for r in runner.results)
    offers = sorted(r.offered_at_s for r in runner.results)
    assert offers[-1] > offers[0]


async def test_dead_url_is_a_target_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with Runner(f"http://127.0.0.1:{port}") as runner:
        with pytest.raises(TargetError, match=r"cannot reach .*: connection refused$"):
            await runner.resolve_model()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtop", "load", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_dead_url_is_one_line_exit_3() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_cli("--url", f"http://127.0.0.1:{port}", "--requests", "1")
    assert out.returncode == 3
    assert out.stderr == f"llmtop: cannot reach http://127.0.0.1:{port}: connection refused\n"
    assert "Traceback" not in out.stderr


def test_cli_bad_flags_are_usage_errors() -> None:
    out = run_cli("--url", "http://127.0.0.1:1", "--e2e-slo-s", "soon")
    assert out.returncode == 2
    assert "--e2e-slo-s" in out.stderr
    out = run_cli("--url", "http://127.0.0.1:1", "--concurrency", "2", "--rate", "3")
    assert out.returncode == 2


def test_cli_json_summary(serve_app: Callable[[Any], ServerThread]) -> None:
    app, _ = scripted_app(ttft_s=0.01, gap_s=0.005)
    server = serve_app(app)
    out = run_cli(
        "--url", server.url, "--concurrency", "2", "--requests", "6", "--prompt-tokens", "10:20",
        "--output-tokens", "4", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["offered"], doc["ok"], doc["output_tokens"]) == (6, 6, 24)
    assert doc["goodput_frac"] == 1.0
    assert doc["ttft"]["p50_s"] > 0
    out = run_cli("--url", server.url, "--rate", "20", "--requests", "3", "--output-tokens", "2")
    assert out.returncode == 0, out.stderr
    assert "goodput" in out.stdout
    assert "TTFT" in out.stdout


async def test_cancelled_loop_records_cuts_and_stops(
    serve_app: Callable[[Any], ServerThread],
) -> None:
    app, _ = scripted_app(ttft_s=10.0)
    server = serve_app(app)
    async with Runner(server.url, max_requests=100) as runner:
        await runner.resolve_model()
        loop = ClosedLoop(runner, Shape(output_tokens=2), 2)
        deadline = asyncio.get_running_loop().time() + 10
        while runner.in_flight < 2:  # both workers' requests are out (the upstream holds them)
            assert asyncio.get_running_loop().time() < deadline, runner.in_flight
            await asyncio.sleep(0.01)
        await asyncio.wait_for(loop.aclose(), 5)
        assert runner.in_flight == 0
        assert runner.issued == 2  # the cancelled workers sent nothing more
    assert [r.outcome for r in runner.results] == ["cut", "cut"]


def test_cli_ctrl_c_still_prints_the_summary(serve_app: Callable[[Any], ServerThread]) -> None:
    import signal
    import time

    app, seen = scripted_app(ttft_s=30.0)
    server = serve_app(app)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "load", "--url", server.url, "--concurrency", "2",
         "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while seen["count"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    doc = json.loads(out)
    assert (doc["offered"], doc["cut"]) == (2, 2)
