"""A real Prometheus for tests: found or installed (harness/system_tools.py), started on a free
port scraping given targets, waited for; the processes a test starts, stopped after it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.http_ready import wait_ready
from harness.system_tools import system_binary
from llmtop.serve.stack import free_port


def find_prometheus() -> str:
    """The prometheus binary, installed when missing (harness/system_tools.py); else skip."""
    return system_binary("prometheus")


def start(args: list[str], procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(proc)
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.terminate()
    for p in started:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()


def start_prometheus(
    binary: str, targets: list[str], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> str:
    """A Prometheus scraping `targets` (host:port) every second as job `vllm`, each with a
    `pod` label as Kubernetes service discovery gives one (sim-<port>); its URL once ready."""
    port = free_port()
    listed = ", ".join(f"'{t}'" for t in targets)
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{listed}]\n"
        "    relabel_configs:\n"
        "      - source_labels: [__address__]\n        regex: '.*:(\\d+)'\n"
        "        target_label: pod\n        replacement: sim-$1\n"
    )
    start(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        procs,
    )
    prom_url = f"http://127.0.0.1:{port}"
    wait_ready(prom_url + "/-/ready", 30)
    return prom_url


def wait_scraped(prom_url: str, scrapes: int, deadline_s: float) -> None:
    """Until Prometheus has scraped every target `scrapes` times (it finds them ~5 s after it
    is ready)."""
    query = f'min(count_over_time(up{{job="vllm"}}[1m])) >= {scrapes}'
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        answer = httpx.post(f"{prom_url}/api/v1/query", data={"query": query}, timeout=5).json()
        if answer["data"]["result"]:
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus did not scrape its targets {scrapes} times in {deadline_s} s")


def close(a: float | None, b: float | None, rel: float, abs_: float = 0.0) -> bool:
    """Both unknown (no first token in the window, say), or within rel (or abs_) of each other."""
    if a is None and b is None:
        return True
    return a is not None and b is not None and abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)
