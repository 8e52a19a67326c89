"""Capture the sim's /metrics idle and under load, like the real vLLM captures in tests/fixtures.

    python scripts/capture_sim_metrics.py tests/fixtures [--seconds 12]

writes sim-metrics-idle.txt and sim-metrics-load.txt: the seed profile with 64 closed-loop
streams of 600-token prompts, scraped when the KV cache is full, requests wait and preemptions
have happened. Parser tests read these files; rerun this when the metric set changes.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.settings import SimSettings
from llmtop.sim.server import create_app


async def _load(url: str, streams: int, seconds: float) -> str:
    """Run closed-loop streams for `seconds`; return the last /metrics scraped under load."""
    rng = random.Random(7)
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=streams + 4)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def stream(i: int) -> None:
            while time.monotonic() < stop:
                body = {
                    "prompt": [i % 100 + 1] * 600,
                    "max_tokens": rng.randint(50, 300),
                    "stream": True,
                }
                async with client.stream("POST", "/v1/completions", json=body) as r:
                    async for _ in r.aiter_raw():
                        if time.monotonic() >= stop:
                            break

        tasks = [asyncio.create_task(stream(i)) for i in range(streams)]
        best = ""
        while time.monotonic() < stop - 0.3:
            await asyncio.sleep(0.25)
            text = (await client.get("/metrics")).text
            if "vllm:num_requests_waiting{" in text and _saturated(text):
                best = text
        if not best:
            best = (await client.get("/metrics")).text
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return best


def _saturated(text: str) -> bool:
    values = {}
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_waiting{", "vllm:num_preemptions_total{")):
            values[line.split("{", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return (
        values.get("vllm:num_requests_waiting", 0) > 0
        and values.get("vllm:num_preemptions_total", 0) > 0
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--streams", type=int, default=64)
    args = parser.parse_args()
    server = ServerThread(create_app(SimSettings(port=0, profile="seed"))).start()
    try:
        idle = httpx.get(f"{server.url}/metrics").text
        load = asyncio.run(_load(server.url, args.streams, args.seconds))
    finally:
        server.stop()
    (args.outdir / "sim-metrics-idle.txt").write_text(idle)
    (args.outdir / "sim-metrics-load.txt").write_text(load)


if __name__ == "__main__":
    main()
