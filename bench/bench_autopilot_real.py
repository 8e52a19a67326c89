"""W1 and W3 of bench_autopilot.py over real sockets: `llmtop sim` and `llmtop gateway
--autopilot` each in its own process, the `llmtop.load` client here, in real time; beside each,
the same workload in virtual time (bench_autopilot.simulate), to see the virtual figures hold.

    python bench/bench_autopilot_real.py [--minutes 3]

W3 runs `--minutes` of Poisson arrivals at 1.5x the mix's capacity (two open loops: 80 % short
chat 200/150, 20 % long 4,000/256, token-id prompts); the virtual run uses the same rates and
length (its own draw of the arrivals). Bounded: every request has a 120 s read timeout and the
run stops offering after `--minutes`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_autopilot as va  # noqa: E402

from llmtop.core.derive.percentiles import percentile_linear as percentile  # noqa: E402
from llmtop.load.stats import RequestResult  # noqa: E402


def _serve(kind: str, upstream: str | None, conn: Any) -> None:
    """Child process: the sim, or the gateway in auto mode; its URL sent back; runs until told."""
    from llmtop.asgi.uvicorn_runner import ServerThread

    if kind == "sim":
        from llmtop.settings import SimSettings
        from llmtop.sim.server import create_app as sim_app

        server = ServerThread(sim_app(SimSettings(port=0))).start()
    else:
        from llmtop.gateway.server.app import create_app as gateway_app
        from llmtop.settings import GatewaySettings

        assert upstream is not None
        settings = GatewaySettings(upstream=upstream, listen="127.0.0.1:0", autopilot=True)
        server = ServerThread(gateway_app(settings)).start()
    conn.send(server.url)
    conn.recv()
    server.stop()


@dataclass
class Real:
    results: list[RequestResult]
    wall_s: float
    preemptions: float
    moves: int

    def good(self, r: RequestResult) -> bool:
        tpot = r.tpot_s if r.tpot_s is not None else 0.0
        return bool(
            r.outcome == "ok"
            and r.ttft_s is not None
            and r.ttft_s <= va.TTFT_SLO_S
            and tpot <= va.ITL_SLO_S
        )

    @property
    def goodput(self) -> float:
        return sum(self.good(r) for r in self.results) / len(self.results)

    @property
    def tok_s(self) -> float:
        return sum(r.output_tokens for r in self.results if r.outcome == "ok") / self.wall_s

    @property
    def rejected(self) -> float:
        return sum(r.outcome == "rejected" for r in self.results) / len(self.results)

    @property
    def ttft_p95(self) -> float:
        v = percentile([r.ttft_s for r in self.results if r.outcome == "ok" and r.ttft_s], 95)
        return float("nan") if v is None else v


async def _ready(gw: str) -> None:
    """Until the gateway has read the engine's KV capacity (its first scrape)."""
    import httpx

    async with httpx.AsyncClient(base_url=gw, timeout=5) as c:
        for _ in range(100):
            s = (await c.get("/admin/stats")).json()
            if (s.get("autopilot") or {}).get("budget_blocks"):
                return
            await asyncio.sleep(0.1)
    raise RuntimeError("the gateway never read the engine's KV capacity")


async def _client(gw: str, workload: str, minutes: float, caps: dict[str, float]) -> Real:
    from llmtop.load.drivers import ClosedLoop, OpenLoop
    from llmtop.load.runner import Runner, Shape

    await _ready(gw)
    t0 = time.monotonic()
    if workload == "W1":
        shape = Shape(prompt_tokens=(4000, 4000), output_tokens=256)
        async with Runner(
            gw, model="llmtop-sim", max_requests=32, max_connections=40, request_timeout_s=120.0
        ) as runner:
            loop = ClosedLoop(runner, shape, 32)
            await asyncio.wait_for(loop.wait(), 300.0)
            results = list(runner.results)
    else:
        rate = 1.5 * caps["mix"]
        dur = minutes * 60.0
        runners = []
        loops = []
        for share, (p, o), seed in ((0.8, va.SHORT, 1), (0.2, va.LONG, 2)):
            n = max(1, round(share * rate * dur))
            r = Runner(
                gw,
                model="llmtop-sim",
                max_requests=n,
                max_connections=400,
                request_timeout_s=120.0,
                seed=seed,
            )
            runners.append(r)
            loops.append(
                OpenLoop(
                    r, Shape(prompt_tokens=(p, p), output_tokens=o), share * rate, 1.0, seed=seed
                )
            )
        try:
            await asyncio.wait_for(asyncio.gather(*(lp.run() for lp in loops)), dur + 300.0)
        finally:
            for r in runners:
                await r.aclose()
        results = [x for r in runners for x in r.results]
    wall = time.monotonic() - t0
    return Real(results, wall, 0.0, 0)


def run(workload: str, minutes: float, caps: dict[str, float]) -> Real:
    import httpx

    from llmtop.core.exposition import promtext

    ctx = mp.get_context("spawn")
    sim_parent, sim_child = ctx.Pipe()
    gw_parent, gw_child = ctx.Pipe()
    sim = ctx.Process(target=_serve, args=("sim", None, sim_child))
    sim.start()
    gw = None
    try:
        sim_url = sim_parent.recv()
        gw = ctx.Process(target=_serve, args=("gateway", sim_url, gw_child))
        gw.start()
        gw_url = gw_parent.recv()
        real = asyncio.run(_client(gw_url, workload, minutes, caps))
        text = httpx.get(f"{sim_url}/metrics", timeout=10).text
        real.preemptions = sum(
            s.value for s in promtext.parse(text) if s.name == "vllm:num_preemptions_total"
        )
        events = httpx.get(f"{gw_url}/admin/events", timeout=10).json()["events"]
        real.moves = sum(e["source"] == "autopilot" for e in events)
        return real
    finally:
        for parent, proc in ((gw_parent, gw), (sim_parent, sim)):
            if proc is None:
                continue
            parent.send("stop")
            proc.join(30)
            if proc.is_alive():
                proc.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="W3's length (default 3)")
    parser.add_argument("--only", default="W1,W3")
    args = parser.parse_args()
    caps = {k: va.capacity(m) for k, m in va.MIXES.items()}
    ws = {w.key: w for w in va.workloads(caps, minutes=args.minutes)}
    head = "| workload | where | goodput | output tok/s | preemptions | TTFT p95 served |"
    print(head + " rejected | autopilot moves |")
    print("|---|---|---|---|---|---|---|---|")
    for key in args.only.split(","):
        t = time.monotonic()
        real = run(key, args.minutes, caps)
        wall = time.monotonic() - t
        v = va.run(ws[key], va.auto())
        for where, row in (
            (
                f"sockets ({wall:.0f} s wall)",
                (
                    real.goodput,
                    real.tok_s,
                    real.preemptions,
                    real.ttft_p95,
                    real.rejected,
                    real.moves,
                ),
            ),
            ("virtual", (v.goodput, v.tok_s, v.preemptions, v.ttft_p95, v.rejected, len(v.moves))),
        ):
            g, tok, pre, p95, rej, moves = row
            print(
                f"| {key} | {where} | {g:.0%} | {tok:,.0f} | {pre:.0f} | {p95:.1f} s |"
                f" {rej:.0%} | {moves} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
