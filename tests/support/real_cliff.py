"""The cliff and its fix on a real vLLM: a burst straight at vLLM, then the same burst through
the llmtop gateway capped at what the KV arithmetic says fits.

One Collector (the TUI's poll loop, default health settings: fire after 3 s, clear after 10 s)
watches both phases, so the findings are those an operator would have seen. Per request the
client records TTFT and the gateway's x-llmtop-queue-ms; "admitted TTFT" is TTFT less the time
queued in the gateway, i.e. what the engine made the request wait once it was let in.

Also a command that prints the figures as markdown (BENCHMARKS.md, "On the real vLLM (CPU build)"):
    LLMTOP_REAL_VLLM_URL=http://127.0.0.1:8000 python -m tests.support.real_cliff --n 48 \\
        --prompt 600 --output 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmtop.core.base.snapshot import Snapshot
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from tests.support.vllm_client import (
    Metrics,
    Result,
    TeeTransport,
    bucket_deltas,
    burst,
    median,
    p95,
    quantile,
    scrape,
    wait_idle,
)

WATCHED = ("kv-exhausted", "degraded-200")
TTFT = "vllm:time_to_first_token_seconds"
# "cap concurrency at ~N", or "(cap ~N)" when clients call vLLM around a watched gateway
_CAP = re.compile(r"~(\d+)")


@dataclass
class Phase:
    """What one burst did, as the client, vLLM's counters and llmtop's findings saw it."""

    name: str
    n: int
    ok: int
    errors: list[str]
    wall_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    admitted_ttft_p50_s: float
    admitted_ttft_p95_s: float
    queue_p95_s: float
    vllm_ttft_p95_s: float | None
    """From vLLM's own TTFT histogram over the phase (bucket-interpolated)."""
    preemptions: float
    generated_tokens: float
    decode_tok_per_s: float
    kv_peak: float
    waiting_peak: float
    running_peak: float
    findings_seen: list[str]
    """Every finding id that fired at some poll during the phase."""
    findings_at_end: list[str]
    suggested_cap: int | None
    """The N in llmtop's "cap concurrency at ~N" action, when a KV finding gave one."""
    polls: int = 0
    timeline: list[dict[str, Any]] = field(default_factory=list)


def kv_fit(m: Metrics, prompt: int, output: int) -> tuple[int, int]:
    """Sequences that fit, by tokens (what llmtop says) and by whole blocks (what vLLM does).

    vLLM allocates whole blocks and keeps one block back (the null block), so the block count
    can be lower than the token count: 1,000-token requests are 8 blocks, 31 usable / 8 = 3,
    while 4,096 / 1,000 = 4.
    """
    cfg = m.cache_config()
    blocks, size = int(cfg["num_gpu_blocks"]), int(cfg["block_size"])
    by_tokens = max(1, (blocks * size) // (prompt + output))
    by_blocks = max(1, (blocks - 1) // math.ceil((prompt + output) / size))
    return by_tokens, by_blocks


async def run_phase(
    name: str,
    collector: Collector,
    vllm_url: str,
    target_url: str,
    n: int,
    prompt: int,
    output: int,
    *,
    seed: int,
    poll_s: float = 1.0,
    timeout_s: float = 900.0,
) -> Phase:
    """Send the burst to `target_url` (vLLM or the gateway) and poll llmtop until it is done."""
    before = scrape(vllm_url)
    t0 = time.monotonic()
    load = asyncio.ensure_future(
        burst(target_url, n, prompt, output, seed=seed, timeout_s=timeout_s)
    )
    seen: set[str] = set()
    last: Snapshot | None = None
    kv_peak = waiting_peak = running_peak = 0.0
    suggested: int | None = None
    timeline: list[dict[str, Any]] = []
    polls = 0
    try:
        while not load.done():
            snap = await collector.poll()
            polls += 1
            last = snap
            e = snap.engines[0]
            ids = [f.id for f in snap.findings]
            seen.update(ids)
            kv_peak = max(kv_peak, e.kv_cache_usage_frac or 0.0)
            waiting_peak = max(waiting_peak, e.waiting or 0.0)
            running_peak = max(running_peak, e.running or 0.0)
            for f in snap.findings:
                m = _CAP.search(f.action)
                if f.id == "kv-exhausted" and m:
                    suggested = int(m.group(1))
            timeline.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "running": e.running,
                    "waiting": e.waiting,
                    "kv": e.kv_cache_usage_frac,
                    "ttft_p95_s": e.ttft_p95_s,
                    "findings": ids,
                    "gateway_queued": snap.gateway.queued if snap.gateway else None,
                }
            )
            await asyncio.sleep(poll_s)
        results: list[Result] = await load
    finally:
        if not load.done():
            load.cancel()
    wall = time.monotonic() - t0
    after = wait_settled(vllm_url, before, n, output)
    ok = [r for r in results if r.status == 200 and r.error is None and r.ttft_s is not None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    admitted = [r.engine_ttft_s for r in ok if r.engine_ttft_s is not None]
    queued = [r.queue_s or 0.0 for r in ok]
    gen = after.need("vllm:generation_tokens_total") - before.need("vllm:generation_tokens_total")
    return Phase(
        name=name,
        n=n,
        ok=len(ok),
        errors=[r.error or f"HTTP {r.status}" for r in results if r not in ok],
        wall_s=wall,
        ttft_p50_s=median(ttfts),
        ttft_p95_s=p95(ttfts),
        admitted_ttft_p50_s=median(admitted),
        admitted_ttft_p95_s=p95(admitted),
        queue_p95_s=p95(queued),
        vllm_ttft_p95_s=quantile(0.95, bucket_deltas(before, after, TTFT)),
        preemptions=after.need("vllm:num_preemptions_total")
        - before.need("vllm:num_preemptions_total"),
        generated_tokens=gen,
        decode_tok_per_s=gen / wall,
        kv_peak=kv_peak,
        waiting_peak=waiting_peak,
        running_peak=running_peak,
        findings_seen=sorted(seen),
        findings_at_end=sorted(f.id for f in last.findings) if last else [],
        suggested_cap=suggested,
        polls=polls,
        timeline=timeline,
    )


def wait_settled(
    url: str, before: Metrics, n: int, output: int, timeout_s: float = 30.0
) -> Metrics:
    """The scrape once every token of the burst is counted (bounded wait)."""
    deadline = time.monotonic() + timeout_s
    gen = "vllm:generation_tokens_total"
    while True:
        m = scrape(url)
        if m.need(gen) - before.need(gen) >= n * output or time.monotonic() > deadline:
            return m
        time.sleep(0.25)


async def wait_clear(collector: Collector, ids: tuple[str, ...], timeout_s: float = 60.0) -> None:
    """Poll until none of `ids` is active (the engine idle, hysteresis run out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = await collector.poll()
        if not {f.id for f in snap.findings} & set(ids):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"findings still active after {timeout_s:.0f}s idle")
        await asyncio.sleep(1.0)


async def experiment(
    vllm_url: str,
    start_gateway: Any,
    n: int,
    prompt: int,
    output: int,
    *,
    cap: int | None = None,
) -> tuple[Phase, Phase, dict[str, Any]]:
    """Direct burst, then the gateway capped at the KV fit; one collector watches both."""
    idle = wait_idle(vllm_url)
    by_tokens, by_blocks = kv_fit(idle, prompt, output)
    cap = cap or by_tokens
    gw = start_gateway(vllm_url, max_concurrency=cap, max_queue=max(128, n), queue_timeout_s=900.0)
    tee = TeeTransport()
    monitor = MonitorSettings(vllm_urls=(vllm_url,), gateway_url=gw.url, nvml=False, interval_s=1.0)
    collector = Collector(monitor, HealthSettings(), transport=tee, timeout_s=10.0)
    try:
        direct = await run_phase("direct", collector, vllm_url, vllm_url, n, prompt, output, seed=1)
        wait_idle(vllm_url)
        await wait_clear(collector, WATCHED)
        capped = await run_phase(
            f"gateway max_concurrency={cap}", collector, vllm_url, gw.url, n, prompt, output, seed=2
        )
    finally:
        await collector.aclose()
    info = {
        "n": n,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "kv_tokens": int(idle.cache_config()["num_gpu_blocks"])
        * int(idle.cache_config()["block_size"]),
        "fit_by_tokens": by_tokens,
        "fit_by_blocks": by_blocks,
        "cap": cap,
    }
    return direct, capped, info


def markdown(direct: Phase, capped: Phase, info: dict[str, Any]) -> str:
    """The two phases side by side."""

    def s(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f} s"

    rows = [
        ("requests ok / sent", f"{direct.ok}/{direct.n}", f"{capped.ok}/{capped.n}"),
        ("wall time", s(direct.wall_s), s(capped.wall_s)),
        (
            "decode tok/s (aggregate)",
            f"{direct.decode_tok_per_s:.0f}",
            f"{capped.decode_tok_per_s:.0f}",
        ),
        ("preemptions", f"{direct.preemptions:.0f}", f"{capped.preemptions:.0f}"),
        ("KV usage peak", f"{direct.kv_peak:.2f}", f"{capped.kv_peak:.2f}"),
        (
            "running / waiting peak (vLLM)",
            f"{direct.running_peak:.0f} / {direct.waiting_peak:.0f}",
            f"{capped.running_peak:.0f} / {capped.waiting_peak:.0f}",
        ),
        (
            "admitted TTFT p50 / p95",
            f"{s(direct.admitted_ttft_p50_s)} / {s(direct.admitted_ttft_p95_s)}",
            f"{s(capped.admitted_ttft_p50_s)} / {s(capped.admitted_ttft_p95_s)}",
        ),
        ("vLLM TTFT p95 (its histogram)", s(direct.vllm_ttft_p95_s), s(capped.vllm_ttft_p95_s)),
        ("client TTFT p95 incl. gateway queue", s(direct.ttft_p95_s), s(capped.ttft_p95_s)),
        ("gateway queue wait p95", "-", s(capped.queue_p95_s)),
        (
            "findings fired",
            ", ".join(direct.findings_seen) or "none",
            ", ".join(capped.findings_seen) or "none",
        ),
    ]
    ratio = (
        direct.admitted_ttft_p95_s / capped.admitted_ttft_p95_s
        if capped.admitted_ttft_p95_s > 0
        else math.inf
    )
    head = (
        f"{info['n']} concurrent requests, {info['prompt_tokens']}-token prompts (unique), "
        f"{info['output_tokens']} output tokens; KV cache {info['kv_tokens']} tokens. "
        f"KV arithmetic: {info['kv_tokens']} / {info['prompt_tokens'] + info['output_tokens']} "
        f"= {info['fit_by_tokens']} sequences (whole blocks: {info['fit_by_blocks']}); "
        f"llmtop suggested ~{direct.suggested_cap}; gateway cap {info['cap']}.\n\n"
    )
    table = "| | direct to vLLM | through the gateway |\n|---|---|---|\n"
    table += "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    return head + table + f"\n\nAdmitted TTFT p95: {ratio:.0f}x lower through the gateway.\n"


async def _main(argv: list[str]) -> int:
    import os

    from llmtop.asgi.uvicorn_runner import ServerThread
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings

    p = argparse.ArgumentParser(description="the cliff and its fix on a real vLLM")
    p.add_argument("--url", default=os.environ.get("LLMTOP_REAL_VLLM_URL", "http://127.0.0.1:8000"))
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--prompt", type=int, default=600)
    p.add_argument("--output", type=int, default=1000)
    p.add_argument("--cap", type=int, help="gateway max_concurrency (default: the KV fit)")
    p.add_argument("--json", help="also write the phases and timelines to this file")
    args = p.parse_args(argv)
    servers: list[ServerThread] = []

    def start_gateway(upstream: str, **kw: Any) -> ServerThread:
        s = ServerThread(create_app(GatewaySettings(upstream=upstream, **kw))).start()
        servers.append(s)
        return s

    try:
        direct, capped, info = await experiment(
            args.url, start_gateway, args.n, args.prompt, args.output, cap=args.cap
        )
    finally:
        for s in servers:
            s.stop()
    print(markdown(direct, capped, info))
    if args.json:
        with Path(args.json).open("w") as f:  # noqa: ASYNC230 - once, at the end
            json.dump(
                {"info": info, "direct": asdict(direct), "capped": asdict(capped)}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
