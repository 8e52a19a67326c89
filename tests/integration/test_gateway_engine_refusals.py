"""vLLM's own 503 refusals (--max-num-queued-reqs) through the gateway: passed on as 503,
counted apart from the gateway's 429s and from engine faults, and named in a finding."""

from __future__ import annotations

import asyncio
import time

import httpx

from llmtop.core.derive.series import CounterWindow
from llmtop.core.findings.refusals import vllm_admission
from llmtop.core.health.rulebase import Context
from llmtop.core.pipeline.pipeline import gateway_stats
from llmtop.settings import HealthSettings
from tests.support.gateway_sim import Start, body


async def test_engine_queue_full_is_a_503_counted_by_reason(
    start_sim: Start, start_gateway: Start
) -> None:
    # vLLM runs 1 at a time and lets 1 wait; the gateway lets 8 through: the rest hit vLLM's limit
    sim = start_sim(profile="fast", max_num_seqs=1, max_num_queued_reqs=1)
    gw = start_gateway(sim.url, max_concurrency=8, max_queue=16)
    window = CounterWindow()
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        before = (await c.get("/admin/stats")).json()
        t0 = time.time()
        results = await asyncio.gather(
            *(c.post("/v1/completions", json=body(60)) for _ in range(6))
        )
        after = (await c.get("/admin/stats")).json()
        metrics = (await c.get("/metrics")).text
    refused = [r for r in results if r.status_code == 503]
    assert refused, [r.status_code for r in results]
    assert all(r.status_code in (200, 503) for r in results)
    err = refused[0].json()["error"]
    assert err["reason"] == "engine_queue_full"
    assert err["upstream_status"] == 503
    assert "--max-num-queued-reqs" in err["message"]
    assert refused[0].headers["retry-after"] == "1"
    # counted as the engine's refusal, not as a gateway 429 and not as an engine fault
    assert after["upstream_errors"] == {"engine_queue_full": len(refused)}
    assert after["rejections"] == before["rejections"]
    assert (
        f'llmtop_gateway_upstream_errors_total{{reason="engine_queue_full",status="503"}} '
        f"{float(len(refused))}" in metrics
    )
    # the monitor's rates and the finding that names vLLM's flag
    g0 = gateway_stats(gw.url, before, t0, window, 60.0)
    g1 = gateway_stats(gw.url, after, t0 + 5.0, window, 60.0)
    assert g0.upstream_errors_per_s == {}
    assert g1.upstream_errors_per_s["engine_queue_full"] == len(refused) / 5.0
    ctx = Context(time=t0 + 5.0, engines=(), gateway=g1, gpus=(), settings=HealthSettings())
    verdict = vllm_admission(ctx)
    assert verdict is not None
    assert "--max-num-queued-reqs" in verdict.summary
    assert "not its own 429s" in verdict.summary


async def test_an_engine_fault_is_not_a_refusal(start_gateway: Start, serve_app: Start) -> None:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def boom(request: object) -> JSONResponse:
        return JSONResponse({"error": {"message": "CUDA error"}}, status_code=503)

    upstream = serve_app(Starlette(routes=[Route("/v1/completions", boom, methods=["POST"])]))
    gw = start_gateway(upstream.url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        r = await c.post("/v1/completions", json=body(4))
        stats = (await c.get("/admin/stats")).json()
    assert r.status_code == 502
    assert r.json()["error"]["reason"] == "engine_unavailable"
    assert stats["upstream_errors"] == {"engine_unavailable": 1}
