"""The KV cliff and its fix on the simulated `seed` engine; prints a markdown section, draws PNGs.

1. Concurrency sweep (virtual time): N closed-loop streams of 512-token prompts and 256 output
   tokens at N = 1, 4, 16, 64, 128; aggregate output tok/s and TTFT p50/p95 over a measured
   window after a warm-up. Beside it, the reference's own measurement: N requests sent at once,
   aggregate = tokens / makespan (34 tok/s single, ~1,041 tok/s at 64).
2. The KV-exhaustion burst (virtual time): 32 requests of 4,000-token prompts (256 out) sent
   together, four ways: no gateway; the gateway with a static cap of 8 (engine at its default
   256 seqs); the engine started with max_num_seqs 8 and the gateway (cap 8) in front; and the
   engine capped alone (the queue inside the engine). Client TTFT counts from the burst (gateway
   queue included); engine TTFT from the request's arrival at the engine, as vLLM reports it.
   Goodput per offered request: the share of the 32 whose client TTFT meets an SLO.
3. With --real: the same burst in real time over sockets (sim and gateway in a child process,
   the loadgen client here), to show the virtual figures hold; a few minutes, bounded.

    python bench/bench_cliff.py [--real] [--plots bench/plots]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.sim_virtual import Burst, run_burst  # noqa: E402
from llmtop.core.derive.percentiles import percentile_linear as percentile  # noqa: E402
from llmtop.sim.model import Engine, EngineConfig, Sequence  # noqa: E402
from llmtop.sim.profiles import get_profile  # noqa: E402

CONCURRENCY = (1, 4, 16, 64, 128)
SLOS_S = (10.0, 30.0)
BURST = Burst(32, 4000, 256)
QUEUE_TIMEOUT_S = 30.0
"""The gateway's default queue timeout: a request queued longer gets a 429."""


def engine(max_num_seqs: int | None = None) -> Engine:
    return Engine(EngineConfig.from_profile(get_profile("seed"), max_num_seqs=max_num_seqs))


def pct(values: list[float], q: float) -> float:
    v = percentile(values, q)
    return float("nan") if v is None else v


# -- 1. the sweep ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """One closed-loop run: output tok/s, client TTFTs (queue included), engine behaviour."""

    tok_s: float
    ttfts: list[float]
    preempt_per_min: float
    kv_mean: float


def closed_loop(n: int, cap: int | None, warmup_s: float = 120.0, window_s: float = 600.0) -> Loop:
    """N clients, each sending again when its request finishes; at most `cap` at the engine
    (a gateway holding the rest, FCFS). TTFTs of the requests offered inside the window."""
    eng = engine()
    limit = n if cap is None else cap
    held: deque[float] = deque()
    offered: dict[str, float] = {}
    in_window: list[Sequence] = []
    at_engine = 0

    def admit() -> None:
        nonlocal at_engine
        while held and at_engine < limit:
            t = held.popleft()
            seq = eng.add_request(512, 256)
            offered[seq.request_id] = t
            at_engine += 1
            if warmup_s <= t < warmup_s + window_s:
                in_window.append(seq)

    held.extend([0.0] * n)
    admit()
    start, end = warmup_s, warmup_s + window_s
    tokens0 = pre0 = -1
    kv_sum = 0.0
    while eng.now < end:
        before = eng.now
        if before >= start and tokens0 < 0:
            tokens0, pre0 = eng.stats.generation_tokens, eng.stats.num_preemptions
        result = eng.step()
        if before >= start:
            kv_sum += eng.kv_cache_usage * (eng.now - before)
        at_engine -= len(result.finished)
        held.extend([eng.now] * len(result.finished))
        admit()
    measured = eng.now - start
    ttfts = [s.first_token_s - offered[s.request_id] for s in in_window if s.first_token_s >= 0]
    return Loop(
        (eng.stats.generation_tokens - tokens0) / measured,
        ttfts,
        60 * (eng.stats.num_preemptions - pre0) / measured,
        kv_sum / measured,
    )


@dataclass(frozen=True)
class SweepPoint:
    n: int
    free: Loop
    capped: Loop
    burst_tok_s: float
    burst_ttft_max: float
    single_decode_tok_s: float


def sweep() -> list[SweepPoint]:
    points = []
    for n in CONCURRENCY:
        done = run_burst(engine(), Burst(n, 512, 256))
        makespan = max(s.finished_s for s in done)
        one = min(done, key=lambda s: s.first_token_s)
        decode = (one.num_output - 1) / (one.finished_s - one.first_token_s)
        points.append(
            SweepPoint(
                n,
                closed_loop(n, None),
                closed_loop(n, 8),
                sum(s.num_output for s in done) / makespan,
                max(s.ttft_s or 0.0 for s in done),
                decode,
            )
        )
    return points


# -- 2. the burst, four ways ------------------------------------------------------------------


@dataclass(frozen=True)
class Way:
    key: str
    label: str
    engine_seqs: int | None
    gateway_cap: int | None


WAYS = (
    Way("none", "no gateway (engine max_num_seqs 256)", None, None),
    Way("gw8", "gateway static cap 8 (engine 256)", None, 8),
    Way("both8", "engine max_num_seqs 8 + gateway cap 8", 8, 8),
    Way("eng8", "engine max_num_seqs 8 alone (queue in the engine)", 8, None),
)


@dataclass(frozen=True)
class Phase:
    """One request of the burst: times from the burst (s)."""

    at_engine: float
    scheduled: float
    first_token: float
    finished: float
    preemptions: int

    @property
    def client_ttft(self) -> float:
        return self.first_token

    @property
    def engine_ttft(self) -> float:
        return self.first_token - self.at_engine


@dataclass(frozen=True)
class BurstResult:
    way: Way
    phases: list[Phase]
    preemptions: int
    makespan: float

    def client(self) -> list[float]:
        return [p.client_ttft for p in self.phases]

    def engine(self) -> list[float]:
        return [p.engine_ttft for p in self.phases]

    def good(self, slo_s: float) -> float:
        """Share of the offered requests whose client TTFT meets the SLO."""
        return sum(t <= slo_s for t in self.client()) / BURST.n


def burst(way: Way) -> BurstResult:
    eng = engine(way.engine_seqs)
    done = run_burst(eng, BURST, max_at_engine=way.gateway_cap)
    assert len(done) == BURST.n
    assert all(s.num_output == BURST.max_tokens for s in done)
    phases = sorted(
        (
            Phase(
                s.arrival_s, s.first_scheduled_s, s.first_token_s, s.finished_s, s.num_preemptions
            )
            for s in done
        ),
        key=lambda p: (p.at_engine, p.first_token),
    )
    return BurstResult(way, phases, eng.stats.num_preemptions, max(p.finished for p in phases))


CAPS = (1, 2, 4, 8, 12, 16, 24, None)


def cap_sweep() -> list[BurstResult]:
    return [burst(Way(f"cap{c}", f"cap {c}", None, c)) for c in CAPS]


# -- 3. the burst in real time ------------------------------------------------------------------


def _serve(engine_seqs: int | None, gateway_cap: int | None, conn: Any) -> None:
    """Child process: the sim (and a gateway in front), URL sent back; runs until told."""
    from llmtop.asgi.uvicorn_runner import ServerThread
    from llmtop.gateway.server.app import create_app as gateway_app
    from llmtop.settings import GatewaySettings, SimSettings
    from llmtop.sim.server import create_app as sim_app

    sim = ServerThread(sim_app(SimSettings(port=0, max_num_seqs=engine_seqs))).start()
    front = sim
    if gateway_cap is not None:
        settings = GatewaySettings(
            upstream=sim.url, max_concurrency=gateway_cap, queue_timeout_s=300.0
        )
        front = ServerThread(gateway_app(settings)).start()
    conn.send((front.url, sim.url))
    conn.recv()
    if front is not sim:
        front.stop()
    sim.stop()


async def _client_burst(url: str) -> list[tuple[float, float]]:
    """Send the burst through the loadgen; (TTFT, E2E) of each request."""
    from llmtop.load.drivers import ClosedLoop
    from llmtop.load.runner import Runner, Shape

    shape = Shape(
        prompt_tokens=(BURST.prompt_tokens, BURST.prompt_tokens), output_tokens=BURST.max_tokens
    )
    async with Runner(
        url,
        model="llmtop-sim",
        max_requests=BURST.n,
        max_connections=BURST.n + 4,
        request_timeout_s=300.0,
    ) as runner:
        loop = ClosedLoop(runner, shape, BURST.n)
        await asyncio.wait_for(loop.wait(), 400.0)
        bad = [r for r in runner.results if r.outcome != "ok"]
        if bad:
            raise RuntimeError(f"{len(bad)} requests failed: {bad[0].error or bad[0].status}")
        return [(r.ttft_s or 0.0, r.e2e_s or 0.0) for r in runner.results]


@dataclass(frozen=True)
class RealRun:
    """The burst over sockets: (TTFT, E2E) per request, and the sim's preemption counter."""

    times: list[tuple[float, float]]
    preemptions: float

    def good(self, slo_s: float) -> float:
        return sum(t <= slo_s for t, _ in self.times) / BURST.n


def real_burst(way: Way) -> RealRun:
    import httpx

    from llmtop.core.exposition import promtext

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(way.engine_seqs, way.gateway_cap, child))
    proc.start()
    try:
        url, sim_url = parent.recv()
        times = asyncio.run(_client_burst(url))
        text = httpx.get(f"{sim_url}/metrics", timeout=10).text
        pre = sum(s.value for s in promtext.parse(text) if s.name == "vllm:num_preemptions_total")
        return RealRun(times, pre)
    finally:
        parent.send("stop")
        proc.join(30)
        if proc.is_alive():
            proc.terminate()


# -- output -----------------------------------------------------------------------------------


def print_sweep(points: list[SweepPoint]) -> None:
    print("### Concurrency sweep (virtual time)\n")
    print("Closed loop: N clients, each sending its next request (512-token prompt, 256 out) when")
    print("the last one finishes; 120 s simulated warm-up, then 600 s simulated measured. Without")
    print("a gateway all N are at the engine; with the gateway's cap of 8, at most 8 are and the")
    print("rest queue in the gateway (client TTFT includes that queue). Burst columns: N requests")
    print("sent at once, aggregate = output tokens / makespan, as the reference was measured.\n")
    print(
        "| N | agg tok/s | TTFT p50 | TTFT p95 | preemptions/min | mean KV use |"
        " cap 8: agg tok/s | cap 8: TTFT p50 | cap 8: TTFT p95 | burst agg tok/s |"
        " burst TTFT max |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in points:
        f, c = p.free, p.capped
        print(
            f"| {p.n} | {f.tok_s:,.0f} | {pct(f.ttfts, 50):.2f} s | {pct(f.ttfts, 95):.2f} s |"
            f" {f.preempt_per_min:,.0f} | {f.kv_mean:.0%} | {c.tok_s:,.0f} |"
            f" {pct(c.ttfts, 50):.2f} s | {pct(c.ttfts, 95):.2f} s | {p.burst_tok_s:,.0f} |"
            f" {p.burst_ttft_max:.2f} s |"
        )
    single = points[0].single_decode_tok_s
    at64 = next(p for p in points if p.n == 64)
    print(
        f"\nReference: one request decodes at 34 tok/s (sim: {single:.1f} tok/s after the"
        f" first token); 64 at once ~1,041 tok/s aggregate (sim: {at64.burst_tok_s:,.0f}).\n"
    )


def print_caps(caps: list[BurstResult]) -> None:
    print("The burst against the gateway's cap (engine at its default 256 seqs):\n")
    slo_cols = " | ".join(f"good @ {s:.0f} s" for s in SLOS_S)
    print(
        f"| cap | client TTFT p50 | p95 | max | engine TTFT max | preemptions | makespan |"
        f" {slo_cols} |"
    )
    print("|---|---|---|---|---|---|---|" + "---|" * len(SLOS_S))
    for r in caps:
        c = r.client()
        goods = " | ".join(f"{r.good(s):.0%}" for s in SLOS_S)
        print(
            f"| {r.way.gateway_cap or 'none'} | {pct(c, 50):.1f} s | {pct(c, 95):.1f} s |"
            f" {max(c):.1f} s | {max(r.engine()):.1f} s | {r.preemptions} |"
            f" {r.makespan:.1f} s | {goods} |"
        )
    print()


def print_burst(results: list[BurstResult], real: dict[str, RealRun]) -> None:
    print("### KV-exhaustion burst: 32 x 4,000-token prompts, 256 out (virtual time)\n")
    print("Client TTFT counts from the moment the burst is sent (gateway queue included); engine")
    print("TTFT from the request's arrival at the engine (vLLM's histogram). Goodput = share of")
    print("the 32 offered requests whose client TTFT meets the SLO. Reference: TTFT toward 55 s.\n")
    slo_cols = " | ".join(f"good @ {s:.0f} s" for s in SLOS_S)
    print(
        f"| way | client TTFT p50 | p95 | max | engine TTFT p95 | max | preemptions |"
        f" makespan | {slo_cols} | queued > {QUEUE_TIMEOUT_S:.0f} s |"
    )
    print("|---|---|---|---|---|---|---|---|" + "---|" * (len(SLOS_S) + 1))
    for r in results:
        c, e = r.client(), r.engine()
        late = sum(p.at_engine > QUEUE_TIMEOUT_S for p in r.phases)
        goods = " | ".join(f"{r.good(s):.0%}" for s in SLOS_S)
        print(
            f"| {r.way.label} | {pct(c, 50):.1f} s | {pct(c, 95):.1f} s | {max(c):.1f} s |"
            f" {pct(e, 95):.1f} s | {max(e):.1f} s | {r.preemptions} | {r.makespan:.1f} s |"
            f" {goods} | {late} |"
        )
    if real:
        print("\nThe same burst in real time over 127.0.0.1 (sim and gateway in a child process,")
        print("`llmtop.load.runner` client; gateway queue timeout raised to 300 s to match):\n")
        slo_cols = " | ".join(f"good @ {s:.0f} s" for s in SLOS_S)
        print(
            f"| way | client TTFT p50 | p95 | max | E2E max | preemptions | {slo_cols} |"
            " virtual: max TTFT | preemptions |"
        )
        print("|---|---|---|---|---|---|" + "---|" * (len(SLOS_S) + 2))
        for r in results:
            run = real.get(r.way.key)
            if run is None:
                continue
            t = [a for a, _ in run.times]
            e2e = max(b for _, b in run.times)
            goods = " | ".join(f"{run.good(s):.0%}" for s in SLOS_S)
            print(
                f"| {r.way.label} | {pct(t, 50):.1f} s | {pct(t, 95):.1f} s | {max(t):.1f} s |"
                f" {e2e:.1f} s | {run.preemptions:.0f} | {goods} | {max(r.client()):.1f} s |"
                f" {r.preemptions} |"
            )
    print()


# -- plots ------------------------------------------------------------------------------------

COLOURS = {"none": "#d62728", "gw8": "#1f77b4", "both8": "#2ca02c", "eng8": "#9467bd"}


def draw(
    folder: Path,
    points: list[SweepPoint],
    results: list[BurstResult],
    caps: list[BurstResult],
    real: dict[str, RealRun],
) -> list[str]:
    """Write the PNGs; return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    ns = [p.n for p in points]

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot(
        ns,
        [p.free.tok_s for p in points],
        "o-",
        color=COLOURS["none"],
        label="no gateway (closed loop)",
    )
    a.plot(
        ns,
        [p.burst_tok_s for p in points],
        "s--",
        color="#ff7f0e",
        label="no gateway (N sent at once)",
    )
    a.plot(
        ns,
        [p.capped.tok_s for p in points],
        "o-",
        color=COLOURS["gw8"],
        label="gateway cap 8 (closed loop)",
    )
    a.plot([1, 64], [34, 1041], "k*", markersize=12, label="reference (34, 1,041)")
    a.set(
        xscale="log",
        xlabel="concurrent clients N",
        ylabel="aggregate output tok/s",
        title="Throughput, seed profile (virtual time)",
    )
    a.set_xticks(ns, [str(n) for n in ns])
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    for loop, colour, label in (
        ("free", COLOURS["none"], "no gateway"),
        ("capped", COLOURS["gw8"], "gateway cap 8, client"),
    ):
        b.plot(
            ns,
            [pct(getattr(p, loop).ttfts, 50) for p in points],
            "o-",
            color=colour,
            label=f"{label} p50",
        )
        b.plot(
            ns,
            [pct(getattr(p, loop).ttfts, 95) for p in points],
            "^:",
            color=colour,
            label=f"{label} p95",
        )
    b.set(
        xscale="log",
        yscale="log",
        xlabel="concurrent clients N",
        ylabel="TTFT (s)",
        title="TTFT, 512-token prompts (closed loop)",
    )
    b.set_xticks(ns, [str(n) for n in ns])
    b.grid(alpha=0.3, which="both")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "cliff_sweep.png", dpi=110)
    plt.close(fig)
    names.append("cliff_sweep.png")

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r, label in (
        (results[0], "no gateway: client = engine"),
        (results[1], "cap 8 in the gateway, the engine or both: client"),
    ):
        ys = sorted(r.client())
        a.step(range(1, len(ys) + 1), ys, where="post", color=COLOURS[r.way.key], label=label)
    gw = results[1]
    a.step(
        range(1, BURST.n + 1),
        sorted(gw.engine()),
        where="post",
        color=COLOURS["gw8"],
        linestyle="--",
        label="gateway cap 8: engine's TTFT",
    )
    for key, run in real.items():
        ys = sorted(t for t, _ in run.times)
        marker_label = {
            "none": "real time over sockets: no gateway",
            "gw8": "... gateway cap 8",
            "both8": "... engine 8 + gateway 8",
        }.get(key)
        a.plot(range(1, len(ys) + 1), ys, "x", color=COLOURS[key], markersize=4, label=marker_label)
    for slo in SLOS_S:
        a.axhline(slo, color="grey", linewidth=0.8, linestyle=":")
        a.text(0.5, slo + 0.6, f"SLO {slo:.0f} s", fontsize=7, color="grey")
    a.axhline(55, color="black", linewidth=0.8, linestyle="-.")
    a.text(0.5, 55.6, "reference: toward 55 s", fontsize=7)
    a.set(
        xlabel="requests, sorted by TTFT",
        ylabel="TTFT (s)",
        title="32 x 4,000-token prompts: TTFT (x = real time)",
    )
    a.grid(alpha=0.3)
    a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, 0.93))
    labels = [str(r.way.gateway_cap or "none") for r in caps]
    x = range(len(caps))
    for k, slo in enumerate(SLOS_S):
        b.bar(
            [i + 0.4 * k - 0.2 for i in x],
            [100 * r.good(slo) for r in caps],
            width=0.4,
            label=f"TTFT <= {slo:.0f} s",
        )
    b.set_xticks(list(x), labels)
    b.set(
        xlabel="gateway cap (requests at the engine)",
        ylabel="% of offered requests",
        title="Goodput per offered request vs cap",
        ylim=(0, 105),
    )
    b.grid(alpha=0.3, axis="y")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "cliff_burst_ttft.png", dpi=110)
    plt.close(fig)
    names.append("cliff_burst_ttft.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharey=True)
    for ax, r in zip(axes, (results[0], results[2]), strict=True):
        for row, ph in enumerate(r.phases):
            segs = [
                (0.0, ph.at_engine, "#bbbbbb"),
                (ph.at_engine, ph.scheduled, "#ffbb78"),
                (ph.scheduled, ph.first_token, "#d62728"),
                (ph.first_token, ph.finished, "#1f77b4"),
            ]
            for lo, hi, colour in segs:
                if hi > lo:
                    ax.barh(row, hi - lo, left=lo, color=colour, height=0.8)
            if ph.preemptions:
                ax.text(ph.finished + 0.5, row, f"x{ph.preemptions}", fontsize=6, va="center")
        ax.set(xlabel="seconds since the burst", title=r.way.label)
        ax.set_title(r.way.label, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_ylabel("request")
    handles = [
        Rectangle((0, 0), 1, 1, color=c) for c in ("#bbbbbb", "#ffbb78", "#d62728", "#1f77b4")
    ]
    fig.legend(
        handles,
        [
            "queued in the gateway",
            "waiting in the engine",
            "first schedule to first token (prefill, recomputes)",
            "decode",
        ],
        loc="lower center",
        ncol=4,
        fontsize=8,
    )
    fig.suptitle("Burst timeline (xN = preempted N times)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(folder / "cliff_burst_timeline.png", dpi=110)
    plt.close(fig)
    names.append("cliff_burst_timeline.png")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", action="store_true", help="also run the burst in real time")
    parser.add_argument("--plots", default=str(ROOT / "bench" / "plots"), help="PNG folder")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()
    t0 = time.process_time()
    points = sweep()
    results = [burst(w) for w in WAYS]
    caps = cap_sweep()
    cpu = time.process_time() - t0
    real: dict[str, RealRun] = {}
    if args.real:
        for w in WAYS[:3]:
            real[w.key] = real_burst(w)
    print("## The cliff and its fix (bench/bench_cliff.py)\n")
    print_sweep(points)
    print_burst(results, real)
    print_caps(caps)
    print(f"Virtual-time part: {cpu:.1f} CPU s for all of the above.\n")
    if not args.no_plots:
        for name in draw(Path(args.plots), points, results, caps, real):
            print(f"![{name}](bench/plots/{name})\n")


if __name__ == "__main__":
    main()
