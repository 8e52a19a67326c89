"""The /metrics of the sim and of the gateway in front of it, after real traffic (so every
histogram and labelled series is populated), pass `promtool check metrics`: the gateway's with
no finding at all, the sim's with none beyond those real vLLM 0.32's own /metrics has (it copies
vLLM's names: `vllm:` colons, a histogram named `vllm:iteration_tokens_total`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.gateway_fakes import wait_stats
from tests.support.gateway_sim import body
from tests.support.promtool import check_metrics, check_vllm_metrics, lint_findings

Start = Callable[..., ServerThread]


async def test_sim_and_gateway_metrics_pass_promtool(
    start_sim: Start, start_gateway: Start, fixtures_dir: Path
) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url, max_concurrency=2, rate_limit_rpm=6000.0)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        for prio in ("high", "normal", "low"):
            r = await c.post("/v1/completions", json=body(4), headers={"x-llmtop-priority": prio})
            assert r.status_code == 200
        await wait_stats(c, lambda s: s["in_flight"] == 0 and s["handler_s"]["p50"] is not None)
        gateway_text = (await c.get("/metrics")).text
    async with httpx.AsyncClient(base_url=sim.url, timeout=30) as c:
        sim_text = (await c.get("/metrics")).text
    assert "vllm:time_to_first_token_seconds_bucket" in sim_text
    assert "llmtop_gateway_handler_seconds_count 3.0" in gateway_text
    assert "llmtop_gateway_priority_clamped_total 1.0" in gateway_text  # the "high" claim
    check_metrics(gateway_text)
    check_vllm_metrics(sim_text, (fixtures_dir / "metrics-load.txt").read_text())


def test_the_sim_check_fails_on_what_real_vllm_does_not_do(fixtures_dir: Path) -> None:
    """The allowance is vLLM's own naming and nothing else: a counter without _total or a
    broken line still fails."""
    real = (fixtures_dir / "metrics-load.txt").read_text()
    bad = "# HELP vllm:made_up A counter.\n# TYPE vllm:made_up counter\nvllm:made_up 1\n"
    assert any("_total" in f for f in lint_findings(bad))
    for text in (bad, "vllm:broken{ 1\n"):
        try:
            check_vllm_metrics(text, real)
        except AssertionError:
            continue
        raise AssertionError(f"accepted: {text!r}")
