"""Onset-to-alert of `degraded-200` on the seed burst, with and without the gateway's age of
the oldest unanswered request, in virtual time (deterministic).

The simulated `seed` engine (llmtop/sim/model.py) serves chats in a closed loop; at t = 30 s a
burst arrives. Two workloads: the seed burst (8 chats of 512/256 tokens, then 24 prompts of
4,000 tokens at once: KV exhausted, TTFT toward a minute, 0 errors), and a full batch (vLLM at
--max-num-seqs 8, busy with 8 answers of 2,000 tokens; 8 chats arrive and wait in vLLM's queue
until one of them ends, and no TTFT is recorded for them until then). Every simulated second the
monitor polls: the sim's real /metrics text (MetricsRenderer) through the real parser, engine
map, derive and health rules (Pipeline), beside a gateway /admin/stats that passes everything
through (max_concurrency 256). With the signal, that stats object carries
`oldest_unanswered_s` as the gateway's proxy computes it (now - arrival of the oldest request at
the engine with no first token); without it, the rules see vLLM's histograms only.

Onset: the first moment a request has waited longer than the TTFT SLO (2 s) for its first
token (arrival + SLO, for the first request whose TTFT exceeds the SLO). Alert: the first poll
at which `degraded-200` is among the findings (fire_after_s 3 s of hysteresis included).

    python bench/bench_alert_latency.py [--burst-at 30] [--polls 120]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtop.core.base.raw import RawEngine, RawPoll  # noqa: E402
from llmtop.core.exposition import promtext  # noqa: E402
from llmtop.core.pipeline.pipeline import Pipeline  # noqa: E402
from llmtop.core.vllm.names import sample_names  # noqa: E402
from llmtop.settings import HealthSettings  # noqa: E402
from llmtop.sim.metrics import MetricsRenderer  # noqa: E402
from llmtop.sim.model import Engine, EngineConfig, Sequence  # noqa: E402
from llmtop.sim.profiles import get_profile  # noqa: E402

URL = "http://127.0.0.1:8000"
GATEWAY = "http://127.0.0.1:9000"
EPOCH = 1_700_000_000.0
CHAT = (512, 256)
LONG = (4000, 256)


@dataclass
class Result:
    with_signal: bool
    onset_s: float | None
    alert_s: float | None
    first_any_s: float | None
    first_any: str | None
    """The first finding of any kind, and when."""
    summary: str | None

    @property
    def latency_s(self) -> float | None:
        if self.onset_s is None or self.alert_s is None:
            return None
        return self.alert_s - self.onset_s


def gateway_stats(
    eng: Engine, seqs: list[Sequence], now: float, with_signal: bool
) -> dict[str, Any]:
    """A pass-through gateway's /admin/stats at `now` (what the proxy would report)."""
    at_engine = len(eng.running) + len(eng.waiting)
    stats: dict[str, Any] = {
        "in_flight": at_engine,
        "queued": 0,
        "outcomes": {},
        "rejections": {},
        "limits": {"max_concurrency": 256, "max_queue": 128, "queue_timeout_s": 30.0},
        "upstream": {"url": URL, "healthy": True, "last_error": None},
    }
    if with_signal:
        waiting = [s.arrival_s for s in seqs if s.first_token_s < 0 and s.arrival_s <= now]
        stats["oldest_queued_s"] = None
        stats["oldest_unanswered_s"] = now - min(waiting) if waiting else None
    return stats


@dataclass(frozen=True)
class Workload:
    name: str
    chats: int
    chat: tuple[int, int]
    burst: int
    shape: tuple[int, int]
    max_num_seqs: int | None = None


WORKLOADS = (
    Workload("seed burst", 8, CHAT, 24, LONG),
    # the batch is full of long answers: new requests wait in vLLM's queue until one ends
    Workload("batch full (--max-num-seqs 8)", 8, (256, 2000), 8, CHAT, max_num_seqs=8),
)


def run(with_signal: bool, w: Workload, burst_at: float, polls: int) -> Result:
    eng = Engine(EngineConfig.from_profile(get_profile("seed"), max_num_seqs=w.max_num_seqs))
    renderer = MetricsRenderer(eng, "llmtop-sim", EPOCH)
    keep = promtext.keep_names(sample_names())
    health = HealthSettings()
    pipe = Pipeline(health)
    seqs: list[Sequence] = [eng.add_request(*w.chat, arrival_s=0.0) for _ in range(w.chats)]
    burst_done = False
    alert = first_any = None
    first_any_id = summary = None
    next_poll = 0.0
    while next_poll <= polls:
        # run the engine up to the next poll; a finished chat is replaced at once (closed loop)
        while eng.now < next_poll:
            if not burst_done and eng.now >= burst_at:
                seqs += [eng.add_request(*w.shape, arrival_s=eng.now) for _ in range(w.burst)]
                burst_done = True
            if not eng.has_work():
                eng.advance_to(min(next_poll, burst_at) if not burst_done else next_poll)
                continue
            res = eng.step()
            for s in res.finished:
                if s.prompt_tokens == w.chat[0]:
                    seqs.append(eng.add_request(*w.chat, arrival_s=eng.now))
        t = next_poll
        text = renderer.render()
        raw = RawPoll(
            time=EPOCH + t,
            engines=(RawEngine(URL, promtext.parse(text, keep)),),
            gateway_url=GATEWAY,
            gateway=gateway_stats(eng, seqs, eng.now, with_signal),
        )
        snap = pipe.update(raw)
        ids = [f.id for f in snap.findings]
        if ids and first_any is None:
            first_any, first_any_id = t, ids[0]
        if "degraded-200" in ids and alert is None:
            alert = t
            summary = next(f.summary for f in snap.findings if f.id == "degraded-200")
        next_poll += 1.0
    slo = health.slo.ttft_s
    late = [
        s.arrival_s + slo
        for s in seqs
        if (s.first_token_s < 0 and eng.now - s.arrival_s > slo)
        or (s.first_token_s >= 0 and s.first_token_s - s.arrival_s > slo)
    ]
    return Result(with_signal, min(late) if late else None, alert, first_any, first_any_id, summary)


async def run_sockets(w: Workload, burst_at: float, duration_s: float) -> tuple[Result, Result]:
    """The same workload over real sockets: `llmtop sim` (wall clock), the gateway in front
    (max_concurrency 256), streaming clients, and the real Collector polling every second. Each
    poll goes to two pipelines: as read, and with the gateway's oldest_* ages removed."""
    import asyncio
    import time

    import httpx

    from llmtop.asgi.uvicorn_runner import ServerThread
    from llmtop.gateway.server.app import create_app as gateway_app
    from llmtop.settings import GatewaySettings, MonitorSettings, SimSettings
    from llmtop.sim.server import create_app as sim_app
    from llmtop.sources.collector import Collector

    sim = ServerThread(sim_app(SimSettings(port=0, profile="seed", max_num_seqs=w.max_num_seqs)))
    sim.start()
    gw = ServerThread(gateway_app(GatewaySettings(upstream=sim.url, max_concurrency=256)))
    gw.start()
    health = HealthSettings()
    collector = Collector(
        MonitorSettings(vllm_urls=(sim.url,), gateway_url=gw.url, nvml=False), health
    )
    pipes = {True: Pipeline(health), False: Pipeline(health)}
    alerts: dict[bool, float | None] = {True: None, False: None}
    summaries: dict[bool, str | None] = {True: None, False: None}
    late: list[float] = []
    t0 = time.monotonic()
    stop = asyncio.Event()

    async def client(c: httpx.AsyncClient, shape: tuple[int, int], loop: bool) -> None:
        while not stop.is_set():
            sent = time.monotonic() - t0
            body = {"prompt": [1] * shape[0], "max_tokens": shape[1], "stream": True}
            first = None
            async with c.stream("POST", "/v1/completions", json=body) as r:
                async for _ in r.aiter_bytes():
                    if first is None:
                        first = time.monotonic() - t0
            if first is None or first - sent > health.slo.ttft_s:
                late.append(sent + health.slo.ttft_s)
            if not loop:
                return

    async def burst(c: httpx.AsyncClient) -> None:
        await asyncio.sleep(burst_at)
        await asyncio.gather(*(client(c, w.shape, False) for _ in range(w.burst)))

    async with httpx.AsyncClient(base_url=gw.url, timeout=600) as c:
        tasks = [asyncio.ensure_future(client(c, w.chat, True)) for _ in range(w.chats)]
        tasks.append(asyncio.ensure_future(burst(c)))
        try:
            while time.monotonic() - t0 < duration_s:
                raw = await collector.read()
                t = time.monotonic() - t0
                stripped = dict(raw.gateway or {})
                stripped.pop("oldest_unanswered_s", None)
                stripped.pop("oldest_queued_s", None)
                variants = {True: raw, False: dataclasses.replace(raw, gateway=stripped)}
                for with_signal, r in variants.items():
                    snap = pipes[with_signal].update(r)
                    hit = [f for f in snap.findings if f.id == "degraded-200"]
                    if hit and alerts[with_signal] is None and t > burst_at:
                        alerts[with_signal], summaries[with_signal] = t, hit[0].summary
                if all(a is not None for a in alerts.values()):
                    break
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - t)))
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await collector.aclose()
            gw.stop()
            sim.stop()
    onset = min((x for x in late if x > burst_at), default=None)
    if onset is None and alerts[True] is not None:
        onset = burst_at + health.slo.ttft_s  # burst requests still unanswered at the end
    return tuple(  # type: ignore[return-value]
        Result(ws, onset, alerts[ws], None, None, summaries[ws]) for ws in (False, True)
    )


def fmt(x: float | None) -> str:
    return "never" if x is None else f"{x:.0f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst-at", type=float, default=30.0)
    ap.add_argument("--polls", type=int, default=120, help="simulated seconds")
    ap.add_argument(
        "--sockets",
        action="store_true",
        help="also run the full-batch workload over real sockets (wall clock, ~1.5 min)",
    )
    args = ap.parse_args()
    print("seed profile; polls every 1 s; TTFT SLO 2 s, fire_after_s 3 s; burst at "
          f"t={args.burst_at:.0f} s")  # fmt: skip
    for w in WORKLOADS:
        print(f"\n{w.name}: {w.chats} chats {w.chat} in a closed loop, then {w.burst} x {w.shape}")
        print(f"{'signal':<28} {'onset':>6} {'degraded-200':>13} {'onset->alert':>13}")
        for with_signal in (False, True):
            r = run(with_signal, w, args.burst_at, args.polls)
            name = "with oldest_unanswered_s" if with_signal else "vLLM histograms only"
            print(f"{name:<28} {fmt(r.onset_s):>6} {fmt(r.alert_s):>13} {fmt(r.latency_s):>13}")
            if r.summary:
                print(f"    {r.summary}")
    if args.sockets:
        import asyncio

        w = WORKLOADS[1]
        print(f"\nsockets, {w.name}: llmtop sim + gateway + Collector, wall clock; burst at 10 s")
        for r in asyncio.run(run_sockets(w, 10.0, 100.0)):
            name = "with oldest_unanswered_s" if r.with_signal else "vLLM histograms only"
            print(f"{name:<28} {fmt(r.onset_s):>6} {fmt(r.alert_s):>13} {fmt(r.latency_s):>13}")
            if r.summary:
                print(f"    {r.summary}")


if __name__ == "__main__":
    main()
