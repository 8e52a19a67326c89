"""The autopilot in front of a real vLLM: a burst through `llmtop gateway --autopilot` with
nobody setting a cap; beside it, one request alone (the TTFT the admitted ones should keep).

"Admitted TTFT" is the client's TTFT less the gateway's x-llmtop-queue-ms. Preemptions are
counted over the whole burst and after its first `settle_s` seconds (the autopilot may learn
from the first ones; after that there should be none).

    LLMTOP_REAL_VLLM_URL=http://127.0.0.1:8000 python -m tests.support.real_autopilot --n 48 \\
        --prompt 600 --output 1000 [--ttft-slo-s 900]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.slo import SloSettings
from tests.support.real_cliff import wait_settled
from tests.support.vllm_client import burst, p95, scrape, wait_idle

PRE = "vllm:num_preemptions_total"


@dataclass
class Run:
    n: int
    ok: int
    rejected: int
    other_errors: list[str]
    wall_s: float
    single_ttft_s: float
    admitted_ttft_p50_s: float
    admitted_ttft_p95_s: float
    client_ttft_p95_s: float
    preemptions: float
    preemptions_after_settle: float
    decode_tok_per_s: float
    budget_blocks: int | None
    capacity_blocks: int | None
    moves: list[str] = field(default_factory=list)


async def _stats(gw: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=gw, timeout=10) as c:
        data: dict[str, Any] = (await c.get("/admin/stats")).json()
        return data


async def single_ttft(url: str, prompt: int, repeat: int = 3) -> float:
    """The median TTFT of one request alone, straight at vLLM."""
    ttfts = []
    for k in range(repeat):
        (r,) = await burst(url, 1, prompt, 16, seed=100 + k, timeout_s=120.0)
        assert r.ttft_s is not None, r.error
        ttfts.append(r.ttft_s)
    return statistics.median(ttfts)


async def run(
    vllm_url: str,
    start_gateway: Callable[..., ServerThread],
    n: int,
    prompt: int,
    output: int,
    *,
    ttft_slo_s: float = 900.0,
    settle_s: float = 10.0,
) -> Run:
    """Baseline, then the burst through a fresh gateway in auto mode."""
    wait_idle(vllm_url)
    single = await single_ttft(vllm_url, prompt)
    wait_idle(vllm_url)
    gw = start_gateway(
        vllm_url,
        autopilot=True,
        slo=SloSettings(ttft_s=ttft_slo_s),
        queue_timeout_s=ttft_slo_s,  # the TTFT budget alone decides who waits
        max_queue=max(128, n),
    ).url
    for _ in range(100):  # its first scrape: the KV capacity
        if ((await _stats(gw)).get("autopilot") or {}).get("budget_blocks"):
            break
        await asyncio.sleep(0.1)
    before = scrape(vllm_url)
    t0 = time.monotonic()
    load = asyncio.ensure_future(burst(gw, n, prompt, output, seed=2, timeout_s=1800.0))
    mid = None
    while not load.done():
        await asyncio.sleep(0.5)
        if mid is None and time.monotonic() - t0 >= settle_s:
            mid = scrape(vllm_url)
    results = await load
    wall = time.monotonic() - t0
    after = wait_settled(vllm_url, before, sum(r.status == 200 for r in results), output)
    mid = mid or after
    ok = [r for r in results if r.status == 200 and r.error is None and r.ttft_s is not None]
    admitted = [r.engine_ttft_s for r in ok if r.engine_ttft_s is not None]
    stats = await _stats(gw)
    async with httpx.AsyncClient(base_url=gw, timeout=10) as c:
        events = (await c.get("/admin/events")).json()["events"]
    gen = after.need("vllm:generation_tokens_total") - before.need("vllm:generation_tokens_total")
    auto = stats.get("autopilot") or {}
    return Run(
        n=n,
        ok=len(ok),
        rejected=sum(r.status == 429 for r in results),
        other_errors=[r.error or "" for r in results if r not in ok and r.status != 429],
        wall_s=wall,
        single_ttft_s=single,
        admitted_ttft_p50_s=statistics.median(admitted) if admitted else float("nan"),
        admitted_ttft_p95_s=p95(admitted) if admitted else float("nan"),
        client_ttft_p95_s=p95([r.ttft_s for r in ok if r.ttft_s is not None]) if ok else 0.0,
        preemptions=after.need(PRE) - before.need(PRE),
        preemptions_after_settle=after.need(PRE) - mid.need(PRE),
        decode_tok_per_s=gen / wall,
        budget_blocks=auto.get("budget_blocks"),
        capacity_blocks=auto.get("capacity_blocks"),
        moves=[str(e.get("reason")) for e in events if e.get("source") == "autopilot"],
    )


def markdown(r: Run, prompt: int, output: int, slo: float) -> str:
    rows = [
        (
            "requests ok / 429 / other errors / sent",
            f"{r.ok} / {r.rejected} / {len(r.other_errors)} / {r.n}",
        ),
        ("wall time", f"{r.wall_s:.0f} s"),
        ("decode tok/s (aggregate)", f"{r.decode_tok_per_s:.0f}"),
        (
            "preemptions (all / after the first 10 s)",
            f"{r.preemptions:.0f} / {r.preemptions_after_settle:.0f}",
        ),
        ("single request's TTFT (median of 3)", f"{r.single_ttft_s:.2f} s"),
        (
            "**admitted TTFT p50 / p95**",
            f"**{r.admitted_ttft_p50_s:.2f} s / {r.admitted_ttft_p95_s:.2f} s**",
        ),
        ("admitted TTFT p95 / single", f"{r.admitted_ttft_p95_s / r.single_ttft_s:.2f}x"),
        ("client TTFT p95 incl. gateway queue", f"{r.client_ttft_p95_s:.1f} s"),
        ("KV budget at the end / the cache (blocks)", f"{r.budget_blocks} / {r.capacity_blocks}"),
        ("autopilot moves", str(len(r.moves))),
    ]
    head = f"{r.n} x ({prompt} + {output} tokens), `--autopilot --ttft-slo-s {slo:g}`, no cap set"
    lines = [f"| {head} | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    lines.append("")
    lines += [f"* {m}" for m in r.moves[:12]]
    return "\n".join(lines)


async def _main(argv: list[str]) -> int:
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings

    p = argparse.ArgumentParser(description="the autopilot in front of a real vLLM")
    p.add_argument("--url", default=os.environ.get("LLMTOP_REAL_VLLM_URL", "http://127.0.0.1:8000"))
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--prompt", type=int, default=600)
    p.add_argument("--output", type=int, default=1000)
    p.add_argument("--ttft-slo-s", type=float, default=900.0)
    args = p.parse_args(argv)
    servers: list[ServerThread] = []

    def start_gateway(upstream: str, **kw: Any) -> ServerThread:
        s = ServerThread(create_app(GatewaySettings(upstream=upstream, **kw))).start()
        servers.append(s)
        return s

    try:
        r = await run(
            args.url, start_gateway, args.n, args.prompt, args.output, ttft_slo_s=args.ttft_slo_s
        )
    finally:
        for s in servers:
            s.stop()
    print(markdown(r, args.prompt, args.output, args.ttft_slo))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
