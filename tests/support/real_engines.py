"""What the tests against real engines other than vLLM share (tests/real_engines/): /health and
llama-server's gauges read now, `llmtop snapshot --json` of one, a bounded burst of streamed
completions, the figures printed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmtop.serve.stack import free_port

LLMTOP = (sys.executable, "-m", "llmtop")
ALARMS = ("warning", "critical")


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


def snapshot(url: str, window_s: float) -> tuple[int, dict[str, Any]]:
    """`llmtop snapshot --json` against the engine at `url`: (exit code, its JSON)."""
    args = ["--engine", url, "--gateway", "off", "--window-s", str(window_s), "--json"]
    done = subprocess.run(
        [*LLMTOP, "snapshot", *args],
        capture_output=True,
        text=True,
        timeout=window_s + 60,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def findings(js: dict[str, Any]) -> list[dict[str, Any]]:
    """A snapshot's findings, those still on and those seen earlier in its window."""
    return [*js["findings"], *js.get("earlier_findings", [])]


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


@contextmanager
def served(script: Path, up: Callable[[str], bool], timeout_s: float) -> Iterator[str]:
    """The base URL of the engine `script` (scripts/real-*) runs: the one it already started
    (left running), else one it serves on a free port now and stops at the end."""
    running = subprocess.run([str(script), "url"], capture_output=True, text=True, check=False)
    if running.returncode == 0 and up(running.stdout.strip()):
        yield running.stdout.strip()
        return
    started = subprocess.run(
        [str(script), "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/{script.name} serve failed:\n{started.stderr[-3000:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(script), "stop"], check=False, timeout=60)
