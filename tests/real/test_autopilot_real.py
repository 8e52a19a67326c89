"""`llmtop gateway --autopilot` in front of the real vLLM, nobody setting a cap: the gateway reads
the KV size from vLLM's own /metrics, admits by footprint and by the prefill backlog, and vLLM
does not thrash.

Sized for the script's server (32 KV blocks of 128 tokens): 24 x (700 + 400) tokens is 9 blocks
a request, so 3 fit; sent straight at vLLM the same burst preempts (tests/real/test_cliff_real.py
shows it). The TTFT SLO is set high so that every request is served (the deadline queue's
refusals are covered on the sim); the admitted TTFT is compared with one request alone.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.real_autopilot import run

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(900)]


async def test_autopilot_stops_preemption_without_a_cap(
    vllm_url: str, start_gateway: Callable[..., ServerThread]
) -> None:
    r = await run(vllm_url, start_gateway, 24, 700, 400, ttft_slo_s=900.0)
    assert r.ok == 24, r.other_errors
    assert r.capacity_blocks == 32
    # vLLM may preempt a little when that serves more (the goodput-seeking budget), never
    # thrash: fewer preemptions than one per two requests (the controller's `thrash`)
    assert r.preemptions_after_settle <= 24 * 0.5
    assert any("start at the KV cache" in m for m in r.moves)
    # the prefill budget: a request let in starts near a lone one's TTFT (issue 27's target)
    assert r.admitted_ttft_p95_s <= 1.5 * r.single_ttft_s + 0.3, r
