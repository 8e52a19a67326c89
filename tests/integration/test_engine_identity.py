"""An engine whose metrics are off is named by its own info endpoint, and `stats-disabled`
gives that engine's switch: llama-server without --metrics answers /metrics 501 and /props,
SGLang without --enable-metrics 404 and /get_server_info, vLLM with --disable-log-stats
/metrics without vllm:* and /version. Real servers on 127.0.0.1, the real CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main

PROCESS_ONLY = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"


def engine(metrics: Response, info_path: str, info: dict[str, Any]) -> Starlette:
    async def read_metrics(request: Request) -> Response:
        return metrics

    async def read_info(request: Request) -> Response:
        return JSONResponse(info)

    return Starlette(routes=[Route("/metrics", read_metrics), Route(info_path, read_info)])


CASES = {
    "llamacpp": (
        engine(
            JSONResponse({"error": {"code": 501, "message": "metrics disabled"}}, 501),
            "/props",
            {"build_info": "b6000-abc", "total_slots": 2},
        ),
        "llama.cpp",
        "restart llama-server with --metrics",
    ),
    "sglang": (
        engine(PlainTextResponse("Not Found", 404), "/get_server_info", {"version": "0.5.2"}),
        "SGLang",
        "restart SGLang with --enable-metrics",
    ),
    "vllm": (
        engine(PlainTextResponse(PROCESS_ONLY), "/version", {"version": "0.32.0"}),
        "vLLM",
        "restart vLLM without --disable-log-stats",
    ),
}


@pytest.fixture(autouse=True)
def no_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMTOP_NVML", "false")


@pytest.mark.parametrize("kind", CASES)
def test_metrics_off_names_the_engine_and_its_switch(
    kind: str,
    serve_app: Callable[[Any], ServerThread],
    capsys: pytest.CaptureFixture[str],
) -> None:
    app, title, switch = CASES[kind]
    url = serve_app(app).url
    code = main(["snapshot", "--window-s", "0.6", "--vllm", url, "--gateway", "off", "--json"])
    data = json.loads(capsys.readouterr().out)
    (e,) = data["engines"]
    assert e["up"] is True
    assert e["engine"]["kind"] == kind
    assert e["engine"]["name"] == title
    assert e["running"] is None  # unknown, never 0
    (finding,) = [f for f in data["findings"] if f["id"] == "stats-disabled"]
    assert finding["action"].startswith(switch)
    assert code == 3  # unknown: nothing read is ever healthy


def test_an_unknown_engine_says_what_it_reads(
    serve_app: Callable[[Any], ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    url = serve_app(engine(PlainTextResponse(PROCESS_ONLY), "/nothing", {})).url
    main(["snapshot", "--window-s", "0.6", "--vllm", url, "--gateway", "off", "--json"])
    data = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in data["findings"] if f["id"] == "stats-disabled"]
    assert "vllm:*, sglang:*, trtllm_*" in finding["summary"]
    assert data["engines"][0]["engine"]["kind"] is None
