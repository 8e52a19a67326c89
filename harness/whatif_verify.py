"""IO: prove a prediction against what then happens. Drive a gateway with open-loop traffic
(`llmtop.load.runner`), calibrate from the engine's /metrics and the gateway's /admin/stats only,
predict each cap, then apply each cap (PATCH /admin/limits) and measure it.

Per cap: set it, wait `settle_s`, then measure over `measure_s`: client TTFT of the requests
offered in that span (loadgen: offer -> first token, gateway queue included) and output tok/s
from the engine's generation counter; then hold the cap `tail_s` more so the measured requests
finish under it. bench/bench_whatif.py and tests/integration/test_whatif_sim.py use this.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from harness.whatif_truth import Spread, spread
from llmtop.core.derive.percentiles import percentile_linear
from llmtop.load.drivers import OpenLoop
from llmtop.load.runner import Runner, Shape
from llmtop.serve.stack import Stack, free_port
from llmtop.sources.gateway import AdminClient, GatewayReader
from llmtop.sources.http.clients import http_client
from llmtop.whatif.collect import collect_window, scrape_once
from llmtop.whatif.model.predict import Prediction, predict
from llmtop.whatif.model.scenario import State
from llmtop.whatif.service import Analysis, Options, analyse, state_of


@dataclass(frozen=True)
class Traffic:
    """The load offered to the gateway: gamma-gapped arrivals, uniform prompt lengths."""

    rate_per_s: float
    prompt_tokens: tuple[int, int]
    output_tokens: int
    seed: int = 0
    burstiness: float = 1.0
    """Gamma shape of the gaps: 1 = Poisson, < 1 bursts (the gaps' CV is 1/sqrt(shape))."""


@dataclass(frozen=True)
class Phases:
    """Seconds of each part of the run."""

    warmup_s: float = 15.0
    window_s: float = 30.0
    settle_s: float = 10.0
    measure_s: float = 30.0
    tail_s: float = 12.0


@dataclass(frozen=True)
class Measured:
    """What one cap did (client side and the engine's counter)."""

    cap: int
    offered: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    output_tok_per_s: float
    rejected: int


@dataclass(frozen=True)
class Row:
    """One cap: the prediction beside the measurement."""

    predicted: Prediction
    measured: Measured
    start: State
    """The state the prediction started from (scraped right before the change)."""
    spread: Spread
    """What one measurement of the span may show (10-90 %), from the same state: the verdict
    that allows for the traffic's and the rate estimate's own noise."""

    @property
    def ttft_p95_error(self) -> float | None:
        p, m = self.predicted.ttft_client_p95_s, self.measured.ttft_p95_s
        return None if p is None or not m else (p - m) / m

    @property
    def tok_error(self) -> float | None:
        p, m = self.predicted.output_tok_per_s, self.measured.output_tok_per_s
        return None if not m else (p - m) / m


async def _generated(client: httpx.AsyncClient, vllm_url: str) -> tuple[float, float]:
    p = await scrape_once(client, vllm_url, None, 5.0)
    return p.t, p.engine.counters.get("generation_tokens", 0.0)


async def verify(
    vllm_url: str,
    gateway_url: str,
    caps: Sequence[int],
    traffic: Traffic,
    phases: Phases,
    opts: Options,
) -> tuple[Analysis, list[Row]]:
    """Calibrate, predict each cap, then apply and measure each; the rows in `caps` order."""
    total_s = phases.warmup_s + phases.window_s + 5.0
    total_s += len(caps) * (phases.settle_s + phases.measure_s + phases.tail_s)
    shape = Shape(prompt_tokens=traffic.prompt_tokens, output_tokens=traffic.output_tokens)
    runner = Runner(
        gateway_url,
        max_requests=int(traffic.rate_per_s * total_s * 2) + 100,
        max_connections=1000,
        seed=traffic.seed,
        request_timeout_s=120.0,
    )
    admin = AdminClient(gateway_url, source="whatif-verify")
    reader = GatewayReader(gateway_url, None, optional=False)
    async with runner, http_client() as client:
        await runner.resolve_model()
        runner.mark_start()
        load = asyncio.ensure_future(
            OpenLoop(runner, shape, traffic.rate_per_s, traffic.burstiness, seed=traffic.seed).run()
        )
        try:
            await asyncio.sleep(phases.warmup_s)
            points = await collect_window(
                vllm_url, gateway_url, window_s=phases.window_s, interval_s=1.0
            )
            run_opts = replace(opts, caps=tuple(caps), band=False)
            analysis = await asyncio.to_thread(analyse, points, run_opts)
            cal = analysis.calibration
            spans: list[tuple[Prediction, State, float, float, float]] = []
            for cand in analysis.predictions[1:]:
                assert cand.candidate.limits is not None
                cap = cand.candidate.limits.max_concurrency
                # Predict from the state right before the change, as a person would see it.
                now = await scrape_once(client, vllm_url, reader, 5.0)
                start = state_of(now, cal.arrival_per_s, cal.limits)
                predicted = await asyncio.to_thread(
                    predict, cal, cand.candidate, horizon_s=phases.measure_s,
                    warmup_s=phases.settle_s, seed=opts.seed, ttft_slo_s=opts.ttft_slo_s,
                    itl_slo_s=opts.itl_slo_s, start=start, replicas=opts.replicas,
                )  # fmt: skip
                await admin.set_limits(max_concurrency=cap)
                await asyncio.sleep(phases.settle_s)
                t0, g0 = await _generated(client, vllm_url)
                m0 = runner.elapsed()
                await asyncio.sleep(phases.measure_s)
                t1, g1 = await _generated(client, vllm_url)
                m1 = runner.elapsed()
                spans.append((predicted, start, m0, m1, (g1 - g0) / (t1 - t0)))
                await asyncio.sleep(phases.tail_s)
        finally:
            runner.stop()
            with contextlib.suppress(Exception):
                await load
            await admin.aclose()
    rows = []
    err = analysis.observed.arrival_error_per_s or 0.0
    for predicted, start, m0, m1, tok_s in spans:
        mine = [r for r in runner.results if m0 <= r.offered_at_s < m1]
        ttfts = [r.ttft_s for r in mine if r.ttft_s is not None]
        assert predicted.candidate.limits is not None
        measured = Measured(
            cap=predicted.candidate.limits.max_concurrency,
            offered=len(mine),
            ttft_p50_s=percentile_linear(ttfts, 50),
            ttft_p95_s=percentile_linear(ttfts, 95),
            output_tok_per_s=tok_s,
            rejected=sum(1 for r in mine if r.status == 429),
        )
        band = await asyncio.to_thread(
            spread, analysis.calibration, predicted.candidate, rate_error_per_s=err,
            horizon_s=phases.measure_s, warmup_s=phases.settle_s, start=start, seed=opts.seed,
        )  # fmt: skip
        rows.append(Row(predicted, measured, start, band))
    return analysis, rows


def _llmtop(stack: Stack, name: str, argv: Sequence[str], logs: str, ready: str) -> None:
    """`llmtop ARGV` as a child of `stack` (this interpreter and import path), once `ready`
    answers 200 (serve.stack's children: their own process group, a log each)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = (sys.executable, "-m", "llmtop", *argv)
    stack.start(name, command, Path(logs, f"{name}.log"), ready, 30.0, env=env)


@contextlib.contextmanager
def serve_gateway(upstream: str, gateway_args: Sequence[str]) -> Iterator[str]:
    """`llmtop gateway` in front of `upstream` on a free 127.0.0.1 port, once it answers; its
    URL; stopped on exit."""
    listen, stack = f"127.0.0.1:{free_port()}", Stack()
    with tempfile.TemporaryDirectory(prefix="llmtop-verify-") as logs:
        try:
            argv = ("gateway", "--vllm", upstream, "--listen", listen, *gateway_args)
            _llmtop(stack, "gateway", argv, logs, f"http://{listen}/admin/stats")
            yield f"http://{listen}"
        finally:
            stack.stop_all()


@contextlib.contextmanager
def serve_stack(sim_args: Sequence[str], gateway_args: Sequence[str]) -> Iterator[tuple[str, str]]:
    """`llmtop sim` and `llmtop gateway` in front of it, as child processes on free 127.0.0.1
    ports; (sim URL, gateway URL); both stopped on exit."""
    port, stack = free_port(), Stack()
    sim = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="llmtop-verify-") as logs:
        try:
            _llmtop(stack, "sim", ("sim", "--port", str(port), *sim_args), logs, sim + "/health")
            with serve_gateway(sim, gateway_args) as gw:
                yield sim, gw
        finally:
            stack.stop_all()
