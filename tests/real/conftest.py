"""Fixtures for the tests against a real vLLM (marker `real_vllm`, outside the default run).

Run them with `LLMTOP_REAL_VLLM=1 pytest -m real_vllm tests/real` after `scripts/real-vllm setup`.
The session starts vLLM through `scripts/real-vllm serve` on a free port and stops it at the end;
with LLMTOP_REAL_VLLM_URL set, or with a server already started by the script, that one is used
and left running. The server must be the script's configuration (tiny model "tinyllm", 32 KV
blocks of 128 tokens, --max-num-seqs 8): the burst sizes below are chosen against it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from tests.support.vllm_client import TeeTransport, wait_idle

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real-vllm"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder needs the real server: mark it, and skip unless asked for."""
    here = Path(__file__).parent
    enabled = os.environ.get("LLMTOP_REAL_VLLM") == "1"
    skip = pytest.mark.skip(reason="needs a real vLLM: LLMTOP_REAL_VLLM=1 (see docs/real-vllm.md)")
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.real_vllm)
            if not enabled:
                item.add_marker(skip)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def vllm_url() -> Iterator[str]:
    """Base URL of a real vLLM serving the tiny model; started for the session when needed."""
    if os.environ.get("LLMTOP_REAL_VLLM") != "1":
        pytest.skip("needs a real vLLM: LLMTOP_REAL_VLLM=1")
    given = os.environ.get("LLMTOP_REAL_VLLM_URL")
    if given:
        url = given.rstrip("/")
        if not _healthy(url):
            pytest.fail(f"LLMTOP_REAL_VLLM_URL={url} does not answer /health")
        yield url
        return
    running = subprocess.run([str(SCRIPT), "url"], capture_output=True, text=True, check=False)
    if running.returncode == 0 and _healthy(running.stdout.strip()):
        yield running.stdout.strip()  # started by hand: leave it running
        return
    started = subprocess.run(
        [str(SCRIPT), "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        check=False,
        timeout=400,
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/real-vllm serve failed:\n{started.stderr[-3000:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(SCRIPT), "stop"], check=False, timeout=60)


@pytest.fixture
def idle_vllm(vllm_url: str) -> str:
    """The real vLLM, once no earlier request is still running or waiting."""
    wait_idle(vllm_url)
    return vllm_url


@pytest.fixture
async def make_collector() -> AsyncIterator[Callable[..., Collector]]:
    """make_collector(vllm_url, tee, gateway_url=None, window_s=...): closed at teardown.

    The default window is longer than any test, so every rate and quantile spans the first poll
    to the latest one: the oracle recomputes the same span from the teed texts.
    """
    made: list[Collector] = []

    def make(
        url: str,
        tee: TeeTransport,
        *,
        gateway_url: str | None = None,
        window_s: float = 3600.0,
        health: HealthSettings | None = None,
    ) -> Collector:
        monitor = MonitorSettings(
            vllm_urls=(url,), gateway_url=gateway_url, nvml=False, interval_s=1.0
        )
        c = Collector(
            monitor, health or HealthSettings(), transport=tee, window_s=window_s, timeout_s=10.0
        )
        made.append(c)
        return c

    yield make
    for c in made:
        await c.aclose()
