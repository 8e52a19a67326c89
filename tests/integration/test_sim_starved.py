"""A starved `llmtop sim` serves what its model says: stopped (SIGSTOP) mid-stream, it catches
up the steps it owed, so its own figures (virtual time, read from /metrics) are the pure
engine's for the same request, however late the process ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from llmtop.serve.stack import free_port
from llmtop.sim.model import Engine, EngineConfig
from llmtop.sim.profiles import get_profile

MAX_TOKENS = 400
"""~1.8 s of decode on the fast profile: the stop lands mid-stream."""
STOP_S = 1.0
"""How long the process is stopped: ~220 steps owed (the catch-up bound is 5 s)."""


def metric(text: str, name: str) -> float:
    """The one sample `name` (its labels aside) of a /metrics text."""
    (value,) = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]
    return value


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "llmtop sim exited"
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"llmtop sim did not answer within {timeout_s:g} s")


def model_e2e_and_ttft(prompt_tokens: int) -> tuple[float, float]:
    """The request alone on the pure engine, in virtual time from its arrival."""
    engine = Engine(EngineConfig.from_profile(get_profile("fast")))
    seq = engine.add_request(prompt_tokens, MAX_TOKENS, arrival_s=0.0)
    for _ in range(MAX_TOKENS + 10):
        if not engine.has_work():
            break
        engine.step()
    assert seq.finished_s > 0
    return seq.finished_s, seq.first_token_s


@pytest.mark.slow(5)
def test_a_stopped_sim_catches_up_the_steps_its_model_owed() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "llmtop", "sim", "--profile", "fast", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        wait_healthy(url, proc)
        body = {"prompt": "hello there", "max_tokens": MAX_TOKENS, "stream": True}
        chunks = 0
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunks += 1
                if chunks == 20:  # mid-stream: the process starves for STOP_S
                    proc.send_signal(signal.SIGSTOP)
                    time.sleep(STOP_S)
                    proc.send_signal(signal.SIGCONT)
        assert chunks >= 20
        text = httpx.get(url + "/metrics", timeout=10).text
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert b"Traceback" not in err, err.decode()
    assert metric(text, "vllm:generation_tokens_total") == MAX_TOKENS
    assert metric(text, "vllm:e2e_request_latency_seconds_count") == 1
    e2e_s, ttft_s = model_e2e_and_ttft(int(metric(text, "vllm:prompt_tokens_total")))
    # Virtual time: the stop (and any late wake-up on a busy machine) costs the model nothing.
    assert metric(text, "vllm:e2e_request_latency_seconds_sum") == pytest.approx(e2e_s, abs=1e-6)
    assert metric(text, "vllm:time_to_first_token_seconds_sum") == pytest.approx(ttft_s, abs=1e-6)
