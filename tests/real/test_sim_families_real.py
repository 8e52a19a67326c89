"""The sim exports every vllm:* family llmtop reads from the live real vLLM (same type, same
label names); the unit test makes the same check against a stored capture."""

from __future__ import annotations

import random
from collections.abc import Callable

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.sim_families import (
    missing_or_different,
    read_by_llmtop,
    sim_metrics_after_traffic,
)
from tests.support.vllm_client import completion_body

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(300)]


def test_sim_matches_live_vllm_families(
    idle_vllm: str, start_sim: Callable[..., ServerThread]
) -> None:
    rng = random.Random(5)
    with httpx.Client(base_url=idle_vllm, timeout=60.0) as client:
        for _ in range(3):  # every histogram has observations, every counter a value
            body = {**completion_body(50, 8, rng), "stream": False}
            body.pop("stream_options")
            assert client.post("/v1/completions", json=body).status_code == 200
        real = client.get("/metrics").text
    assert len(read_by_llmtop(real)) >= 15
    problems = missing_or_different(real, sim_metrics_after_traffic(start_sim))
    assert not problems, "\n".join(problems)
