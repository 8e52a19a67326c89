"""The cliff and its fix on a real vLLM, with llmtop's findings as the operator would see them.

24 requests of 700 + 400 tokens at once: 9 KV blocks each, 3 fit in the 32 blocks (4,096 / 1,100
= 3 by tokens too), while vLLM lets 8 run. Straight at vLLM the cache fills, vLLM preempts and
queues, TTFT climbs: kv-exhausted and degraded-200 must fire, and llmtop's action must name the
cap the KV arithmetic gives. Through the gateway capped there, nothing is preempted, the
admitted TTFT p95 drops, and neither finding fires. Sizes are chosen so that the token and the
whole-block arithmetic agree (see cliff.kv_fit). The figures go to $LLMTOP_REAL_VLLM_RESULTS.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.real_cliff import WATCHED, Phase, experiment, markdown

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1200)]

N, PROMPT, OUTPUT = 24, 700, 400


def _save(direct: Phase, capped: Phase, info: dict[str, Any]) -> None:
    out = os.environ.get("LLMTOP_REAL_VLLM_RESULTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "cliff.md").write_text(markdown(direct, capped, info))
        (Path(out) / "cliff.json").write_text(
            json.dumps({"info": info, "direct": asdict(direct), "capped": asdict(capped)})
        )


async def test_kv_cliff_and_the_gateway_fix(
    idle_vllm: str, start_gateway: Callable[..., ServerThread]
) -> None:
    direct, capped, info = await experiment(idle_vllm, start_gateway, N, PROMPT, OUTPUT)
    _save(direct, capped, info)
    assert info["fit_by_tokens"] == info["fit_by_blocks"] == info["cap"] == 3

    # The cliff: KV full, preemption, requests queued inside vLLM, and llmtop says so.
    assert direct.ok == N, direct.errors
    assert direct.kv_peak >= 0.9
    assert direct.preemptions > 0
    assert direct.waiting_peak > 0
    assert set(WATCHED) <= set(direct.findings_seen), direct.findings_seen
    assert direct.suggested_cap == info["cap"], "llmtop's KV arithmetic differs from the test's"

    # The fix: the gateway holds the excess; vLLM runs what fits and never preempts.
    assert capped.ok == N, capped.errors
    assert capped.preemptions == 0
    assert capped.running_peak <= info["cap"]
    assert capped.waiting_peak <= 1  # a request just admitted may be seen before it is scheduled
    assert not set(WATCHED) & set(capped.findings_seen), capped.findings_seen
    assert capped.admitted_ttft_p95_s < direct.admitted_ttft_p95_s / 4, (
        capped.admitted_ttft_p95_s,
        direct.admitted_ttft_p95_s,
    )
    assert capped.queue_p95_s > 0  # the wait moved into the gateway, where it is bounded
