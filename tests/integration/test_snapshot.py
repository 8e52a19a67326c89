"""`llmtop snapshot` end to end against real servers on 127.0.0.1: exit codes, the --json schema,
an idle simulated engine, and a batching cliff on a simulated engine under growing load."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main
from llmtop.core.base import format as fmt
from llmtop.core.output.summary import EXIT_CODES

ENGINE_KEYS = {
    "url", "up", "model", "engine", "running", "waiting", "waiting_capacity", "kv_cache_usage_frac",
    "kv_cache_usage_peak_frac", "kv_cache_usage_peak_s", "kv_capacity_tokens",
    "prompt_tok_per_s", "decode_tok_per_s", "preemptions_per_s", "ttft_p50_s", "ttft_p95_s",
    "ttft_p99_s", "itl_p95_s", "e2e_p95_s", "queue_time_p95_s", "error",
    "prefix_cache_hit_frac", "spec_acceptance_frac", "spec_mean_accepted_len",
    "spec_acceptance_by_pos", "kv_transfer_bytes_per_s", "kv_transfer_failures_per_s",
    "sleep_state", "healthy", "corrupted_per_s", "unread", "lora", "restarted_at",
}  # fmt: skip
FINDING_KEYS = {
    "id", "severity", "bottleneck", "summary", "action", "first_s", "last_s", "held_polls",
}  # fmt: skip
TOP_KEYS = {
    "time", "window", "status", "engines", "gateway", "gpus", "gpu_error", "findings",
    "earlier_findings", "unavailable_findings",
}  # fmt: skip


@pytest.fixture(autouse=True)
def no_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """These engines are simulated: a real GPU on the test machine is not theirs."""
    monkeypatch.setenv("LLMTOP_NVML", "false")


def steady_text(t: float) -> str:
    """A healthy engine whose counters grow with wall time: 4 running, fast TTFT."""
    n = int(t * 10)
    lab = 'engine="0",model_name="steady"'
    lines = [
        f"vllm:num_requests_running{{{lab}}} 4",
        f"vllm:num_requests_waiting{{{lab}}} 0",
        f"vllm:kv_cache_usage_perc{{{lab}}} 0.3",
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2000"} 1',
        f"vllm:prompt_tokens_total{{{lab}}} {n * 100}",
        f"vllm:generation_tokens_total{{{lab}}} {n * 20}",
        f"vllm:num_preemptions_total{{{lab}}} 0",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {n}',
        f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.1"}} {n // 2}',
        f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.5"}} {n}',
        f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {n}',
        f"vllm:time_to_first_token_seconds_count{{{lab}}} {n}",
        f"vllm:time_to_first_token_seconds_sum{{{lab}}} {n * 0.15}",
    ]
    return "\n".join(lines) + "\n"


def engine_app(texts: Callable[[int], str]) -> Starlette:
    calls = {"n": 0}

    async def metrics(request: Request) -> Response:
        calls["n"] += 1
        return PlainTextResponse(texts(calls["n"]))

    async def version(request: Request) -> Response:
        return JSONResponse({"version": "0.32.0"})

    return Starlette(routes=[Route("/metrics", metrics), Route("/version", version)])


def gateway_app() -> Starlette:
    async def stats(request: Request) -> Response:
        return JSONResponse(
            {
                "in_flight": 3,
                "queued": 0,
                "outcomes": {"completed": 5, "timed_out": 0},
                "rejections": {"queue_full": 0},
                "queue_wait_s": {"p50": 0.0, "p95": 0.1},
                "ttft_s": {"p50": 0.1, "p95": 0.2},
                "paused": False,
                "upstream": {"healthy": True},
                "limits": {"max_concurrency": 8, "max_queue": 128},
            }
        )

    async def events(request: Request) -> Response:
        return JSONResponse({"events": []})

    return Starlette(routes=[Route("/admin/stats", stats), Route("/admin/events", events)])


def snapshot(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["snapshot", "--window-s", "0.6", *args])
    return code, capsys.readouterr().out


def test_degraded_real_capture_exits_critical_with_the_schema(
    serve_app: Callable[[Any], ServerThread],
    fixtures_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    idle = (fixtures_dir / "metrics-idle.txt").read_text()
    load = (fixtures_dir / "metrics-load.txt").read_text()
    # /metrics call 1 is the warm-up read, 2 the window's first poll, 3 its last
    vllm = serve_app(engine_app(lambda n: idle if n <= 2 else load))
    gw = serve_app(gateway_app())
    code, out = snapshot(capsys, "--vllm", vllm.url, "--gateway", gw.url, "--json")
    data = json.loads(out)
    # TTFT p95 96 ms counts the 3 answered; 42 wait at the finish rate: about to miss the SLO
    assert code == 1
    assert data["status"] == "degraded"
    assert set(data) == TOP_KEYS
    assert time.strptime(data["time"], "%Y-%m-%dT%H:%M:%SZ")
    assert time.strptime(data["window"]["start"], "%Y-%m-%dT%H:%M:%SZ")
    assert data["window"]["polls"] == 2  # a window shorter than the interval: both ends
    assert data["window"]["span_s"] >= 0.6
    (engine,) = data["engines"]
    assert set(engine) == ENGINE_KEYS
    assert engine["model"] == "tinyllm"
    assert engine["kv_capacity_tokens"] == 4096
    assert engine["waiting"] == 42
    assert engine["decode_tok_per_s"] > 0
    assert data["gateway"]["max_concurrency"] == 8
    assert data["gateway"]["in_flight"] == 3
    kv = next(f for f in data["findings"] if f["id"] == "kv-exhausted")
    assert set(kv) == FINDING_KEYS
    assert "cap concurrency at ~3" in kv["action"]


def test_healthy_engine_exits_zero_and_prints_a_summary(
    serve_app: Callable[[Any], ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    vllm = serve_app(engine_app(lambda n: steady_text(time.time())))
    code, out = snapshot(capsys, "--vllm", vllm.url, "--gateway", "off")
    assert code == 0
    assert "status OK" in out
    assert "steady (vLLM 0.32.0)" in out
    assert "no findings" in out


def test_unreachable_exits_three(unused_tcp_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}"
    code, out = snapshot(capsys, "--vllm", url, "--gateway", "off", "--json")
    data = json.loads(out)
    assert code == 3
    assert data["status"] == "unknown"
    assert data["engines"][0]["up"] is False
    assert "connection refused" in data["engines"][0]["error"]
    assert data["findings"][0]["id"] == "target-down"


def test_disable_log_stats_exits_three_and_says_why(
    serve_app: Callable[[Any], ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    vllm = serve_app(engine_app(lambda n: 'python_info{version="3.11"} 1.0\n'))
    code, out = snapshot(capsys, "--vllm", vllm.url, "--gateway", "off")
    assert code == 3
    assert "--disable-log-stats" in out


def test_dcgm_gpus_in_the_json(
    serve_app: Callable[[Any], ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    dcgm_text = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",modelName="H100"} 90\n'
        'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",modelName="H100"} 32\n'
    )

    async def dcgm(request: Request) -> Response:
        return PlainTextResponse(dcgm_text)

    vllm = serve_app(engine_app(lambda n: steady_text(time.time())))
    exporter = serve_app(Starlette(routes=[Route("/metrics", dcgm)]))
    code, out = snapshot(
        capsys,
        "--vllm",
        vllm.url,
        "--gateway",
        "off",
        "--dcgm",
        f"{exporter.url}/metrics",
        "--json",
    )
    data = json.loads(out)
    assert data["gpus"][0]["temp_c"] == 90
    assert data["gpus"][0]["throttle_reasons"] == ["sw_thermal"]
    assert data["gpu_error"] is None
    assert [f["id"] for f in data["findings"]] == ["gpu-throttled"]
    # the steady engine is inside the SLO: the throttling is a heads-up, the status ok
    assert data["findings"][0]["severity"] == "info"
    assert code == 0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--window-s", "0"], "--window-s"),
        (["--window-s", "301"], "--window-s"),  # the pipeline keeps 10 minutes; half at most
        (["--window-s", "5", "--interval-s", "0"], "--interval-s"),
    ],
)
def test_bad_window_or_interval_is_a_usage_error(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["snapshot", *flags, "--gateway", "off"]) == 64
    captured = capsys.readouterr()
    assert named in captured.err
    assert captured.out == ""


def test_idle_sim_is_ok_and_exits_zero(
    start_sim: Callable[..., ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    # Idle: up with its core metrics (so not unknown), nothing running, nothing waiting, KV
    # empty, no GPU watched: no rule holds, so the status is ok and the exit code 0.
    sim = start_sim(profile="fast")
    code, out = snapshot(capsys, "--vllm", sim.url, "--gateway", "off", "--json")
    data = json.loads(out)
    (engine,) = data["engines"]
    assert set(engine) == ENGINE_KEYS
    assert (engine["up"], engine["running"], engine["waiting"]) == (True, 0, 0)
    assert engine["kv_capacity_tokens"] == 4096
    assert (data["findings"], data["earlier_findings"]) == ([], [])
    assert data["status"] == "ok"
    assert code == 0


@pytest.fixture
def growing_queue(start_sim: Callable[..., ServerThread]) -> Iterator[str]:
    """A simulated engine with 4 seats offered 2 requests/s that each hold a seat ~9 s.

    It serves ~0.45 requests/s, so the queue grows by ~1.5 a second while the 4 running
    sequences decode at the same rate: a batching cliff. The load is `llmtop load` in its own
    process, bounded in requests and time.
    """
    sim = start_sim(profile="seed", max_num_seqs=4)
    load = subprocess.Popen(
        [
            sys.executable, "-m", "llmtop", "load", "--url", sim.url, "--rate", "2",
            "--burstiness", "100", "--requests", "90", "--duration-s", "45",
            "--prompt-tokens", "64", "--output-tokens", "300",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while waiting(sim.url) < 2:  # the seats are full and the queue has started
            assert load.poll() is None, "llmtop load exited early"
            assert time.monotonic() < deadline, "the sim never queued"
            time.sleep(0.25)
        yield sim.url
    finally:
        load.terminate()
        load.wait(10)


def waiting(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_waiting{")
    )


@pytest.mark.slow(30)
def test_growing_queue_with_flat_decode_is_a_batching_cliff(
    growing_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["snapshot", "--vllm", growing_queue, "--gateway", "off", "--window-s", "15"])
    text = capsys.readouterr().out
    assert "batching-cliff [queue]" in text, text
    assert code in (1, 2), text
    code = main(
        ["snapshot", "--vllm", growing_queue, "--gateway", "off", "--window-s", "15", "--json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == EXIT_CODES[data["status"]] != 0
    cliff = next(f for f in data["findings"] if f["id"] == "batching-cliff")
    # The finding is the last poll's, and its figures are the printed ones.
    (engine,) = data["engines"]
    assert cliff["last_s"] == data["window"]["span_s"] >= 15.0
    assert f"-> {fmt.count(engine['waiting'])} in" in cliff["summary"]
    assert f"decode stays at {fmt.tok_per_s(engine['decode_tok_per_s'])}" in cliff["summary"]
