"""Chaos: traffic through the whole stack while its parts are killed, hung, slowed and restarted,
with every request in exactly one outcome (docs/reliability.md).

Two `llmtop sim` replicas, two `llmtop gateway` processes sharing limits through a real Redis,
the TUI recording in a real terminal (tmux), and an open-loop client at 1.5x the capacity
measured in the warm-up: tenants, priorities, streams and whole answers, clients that leave
mid-stream, and bad requests (malformed JSON, oversized bodies, wrong types, unknown models).
The client routes as a load balancer does: to the gateways whose /readyz is 200 (polled every
0.25 s). On a schedule (harness/chaos_ledger.py) it injects: kill -9 of a replica and its restart,
SIGSTOP of a replica for 20 s, a replica slowed 5x, kill -9 of Redis and its restart, SIGTERM of
a gateway and its restart (a rolling restart), a replica answering garbage for 10 s.

Then it checks the ledger (every request in one outcome, none lost, the gateways' counts equal
to the clients' request for request), that in-flight and queued are back to 0, that no file
descriptor leaked, RSS against the warm-up's, no traceback in any log, the recording read end to
end by `llmtop report`, and which faults the report names within 5 s.

    python bench/chaos.py --duration-s 600 --out /tmp/chaos    # the 10-minute run
    python bench/chaos.py --duration-s 90                      # what the suite runs
    python bench/chaos.py --duration-s 150 --no-faults --load-x 0.7   # a healthy run

Bounded: requests are Poisson arrivals for the load's seconds only, each with a 60 s client
timeout; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness.chaos_ledger import (
    Entry,
    Injection,
    disagreements,
    gateway_tally,
    is_json_error,
    named,
    outcome_of_body,
    outcome_of_stream,
    schedule,
    tallies,
)
from harness.chaos_stack import MAX_BODY_BYTES, Proc, Stack
from harness.http_ready import wait_ready

WARMUP_S = 6.0
TAIL_S = 4.0
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=60)
TENANTS = ("acme", "globex", "initech")
PRIORITIES = ("high", "normal", "normal", "low")


@dataclass
class Run:
    """What one chaos run saw and measured (`--json` prints it)."""

    duration_s: float
    rate_per_s: float = 0.0
    capacity_per_s: float = 0.0
    entries: list[Entry] = field(default_factory=list)
    injections: list[tuple[Injection, float, str | None]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def outcomes(self) -> Counter[str]:
        return Counter(e.outcome or "unended" for e in self.entries)


class Router:
    """The clients' load balancer: round robin over the gateways whose /readyz is 200."""

    def __init__(self, gateways: list[Proc]) -> None:
        self.gateways = gateways
        self.ready = [True] * len(gateways)
        self._next = 0

    def pick(self) -> Proc | None:
        for _ in range(len(self.gateways)):
            i = self._next % len(self.gateways)
            self._next += 1
            if self.ready[i]:
                return self.gateways[i]
        return None

    async def watch(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for i, g in enumerate(self.gateways):
                try:
                    async with session.get(
                        g.url + "/readyz", timeout=aiohttp.ClientTimeout(total=0.5)
                    ) as r:
                        self.ready[i] = r.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    self.ready[i] = False
            await asyncio.sleep(0.25)


def make_request(rng: random.Random) -> tuple[str, bytes, bool]:
    """(kind, body, stream) of one request of the mix."""
    roll = rng.random()
    tokens = rng.choice((16, 24, 32)) if rng.random() < 0.75 else 160
    if roll < 0.02:
        return "bad-json", b'{"model": "llmtop-sim", "prompt": ', False
    if roll < 0.04:
        return "bad-large", b'{"prompt": "' + b"x" * (MAX_BODY_BYTES + 4096) + b'"}', False
    if roll < 0.06:
        doc: dict[str, Any] = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": "many"}
        return "bad-type", json.dumps(doc).encode(), False
    if roll < 0.08:
        doc = {"model": "no-such-model", "prompt": "hi", "max_tokens": 8}
        return "bad-model", json.dumps(doc).encode(), False
    if roll < 0.13:
        doc = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": 160, "stream": True}
        return "cancel", json.dumps(doc).encode(), True
    stream = roll < 0.55
    doc = {"model": "llmtop-sim", "prompt": "hello " * rng.randint(4, 40), "max_tokens": tokens}
    doc["stream"] = stream
    return ("stream" if stream else "plain"), json.dumps(doc).encode(), stream


async def send(
    session: aiohttp.ClientSession,
    gw: Proc,
    e: Entry,
    body: bytes,
    stream: bool,
    rng: random.Random,
) -> None:
    """One request to its one outcome (the ledger's rules: harness/chaos_ledger.py)."""
    headers = {
        "content-type": "application/json",
        "x-llmtop-tenant": rng.choice(TENANTS),
        "x-llmtop-priority": rng.choice(PRIORITIES),
    }
    try:
        async with session.post(
            gw.url + "/v1/completions", data=body, headers=headers, timeout=CLIENT_TIMEOUT
        ) as r:
            e.status = r.status
            if not (stream and r.status == 200):
                heads = {k.lower(): v for k, v in r.headers.items()}
                e.end(*outcome_of_body(r.status, heads, await r.read()))
                return
            events: list[bytes] = []
            async for line in r.content:
                if line.startswith(b"data: "):
                    events = [*events[-1:], line[6:].strip()]
                    last = events[-1]  # the stream's own error is the gateway's to count
                    cancel = e.kind == "cancel" and len(events) == 2 and last != b"[DONE]"
                    if cancel and not is_json_error(last):
                        r.close()  # this client gives up mid-stream
                        e.end("cancelled")
                        return
            e.end(*outcome_of_stream(events))
    except (aiohttp.ClientError, asyncio.TimeoutError) as err:
        e.end("lost", f"{type(err).__name__}: {err}")


async def calibrate(run: Run, router: Router, seconds: float) -> float:
    """Completions per second with twice the global cap of clients busy: the capacity."""
    rng = random.Random(7)
    done = 0
    stop = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < stop:
            gw = router.pick()
            assert gw is not None
            kind, body, stream = make_request(rng)
            if kind not in ("plain", "stream"):
                continue  # the mix of the load, less what costs the engine nothing
            e = Entry(len(run.entries), "warmup-" + kind, gw.incarnation, time.monotonic())
            run.entries.append(e)  # in the ledger too: the gateways count it
            await send(session, gw, e, body, stream, rng)
            done += e.outcome == "served"

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(16)))
    return done / seconds


async def inject(stack: Stack, inj: Injection, run: Run, t0: float) -> None:
    """One fault at its time, and its undoing after its length."""
    await asyncio.sleep(max(0.0, t0 + inj.at_s - time.monotonic()))
    started = time.time()
    url: str | None = None
    if inj.kind.startswith("replica"):
        sim = stack.sims[inj.target]
        url = sim.url
        if inj.kind == "replica-kill":
            sim.kill9()
            await asyncio.sleep(inj.for_s)
            await asyncio.to_thread(sim.start)
        elif inj.kind == "replica-stop":
            sim.signal(signal.SIGSTOP)
            await asyncio.sleep(inj.for_s)
            sim.signal(signal.SIGCONT)
        else:
            name = "slow" if inj.kind == "replica-slow" else "garbage"
            async with (
                aiohttp.ClientSession() as s,
                s.post(sim.url + "/sim/fault", json={"fault": f"{name}+{inj.for_s:g}"}) as r,
            ):
                if r.status != 200:
                    run.problems.append(f"{inj.kind}: the sim answered {r.status}")
    elif inj.kind == "redis-kill":
        stack.redis.kill()
        await asyncio.sleep(inj.for_s)
        await asyncio.to_thread(stack.redis.start)
    elif inj.kind == "gateway-roll":
        gw = stack.gateways[inj.target]
        code = await asyncio.to_thread(gw.terminate)
        if code not in (-signal.SIGTERM, 128 + signal.SIGTERM):
            run.problems.append(f"{gw.incarnation} exited {code} on SIGTERM")
        await asyncio.to_thread(gw.start)
        run.figures.setdefault("fds_start", {})[gw.incarnation] = idle_fds(stack, gw)
        run.injections.append((inj, started, url))
        await asyncio.sleep(15.0)  # warmed under the load again: its RSS to hold to
        run.figures.setdefault("rss_warm_kib", {})[gw.incarnation] = gw.rss_kib()
        return
    run.injections.append((inj, started, url))


async def load(stack: Stack, run: Run, load_s: float, rounds: int) -> None:
    """The open-loop client for `load_s` seconds with the faults of `rounds` rounds (none: 0)."""
    rng = random.Random(35)
    router = Router(stack.gateways)
    stop = asyncio.Event()
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=conn) as session:
        watcher = asyncio.ensure_future(router.watch(session, stop))
        t0 = time.monotonic()
        plan = schedule(load_s, rounds) if rounds else []
        faults = [asyncio.ensure_future(inject(stack, i, run, t0)) for i in plan]
        tasks: set[asyncio.Task[None]] = set()
        while (now := time.monotonic()) < t0 + load_s:
            gw = router.pick()
            kind, body, stream = make_request(rng)
            e = Entry(len(run.entries), kind, gw.incarnation if gw else "none", now)
            run.entries.append(e)
            if gw is None:
                e.end("lost", "no gateway ready")
            else:
                task = asyncio.ensure_future(send(session, gw, e, body, stream, rng))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(rng.expovariate(run.rate_per_s))
        await asyncio.wait_for(asyncio.gather(*faults), 60)
        if tasks:
            await asyncio.wait(tasks, timeout=70)
        stop.set()
        await watcher
    unended = [e for e in run.entries if e.outcome is None]
    for e in unended:
        e.end("lost", "no answer within the client's 60 s")


def stats(gw: Proc) -> dict[str, Any]:
    import httpx

    doc: dict[str, Any] = httpx.get(gw.url + "/admin/stats", timeout=5).json()
    return doc


def at_rest(stack: Stack, run: Run, timeout_s: float = 30.0) -> None:
    """In flight and queued back to 0 on every gateway, and no lease held in Redis."""
    deadline = time.monotonic() + timeout_s
    while True:
        docs = {g.incarnation: stats(g) for g in stack.gateways}
        busy = {
            k: (d["in_flight"], d["queued"])
            for k, d in docs.items()
            if d["in_flight"] or d["queued"]
        }
        if not busy:
            run.figures["in_flight_queued_at_end"] = {k: [0, 0] for k in docs}
            return
        if time.monotonic() > deadline:
            run.problems.append(f"not at rest {timeout_s:g} s after the load: {busy}")
            return
        time.sleep(0.2)


def idle_fds(stack: Stack, gw: Proc) -> int:
    """A gateway's file descriptors less its connections to the replicas and Redis."""
    upstreams = {s.port for s in stack.sims} | {stack.redis.port}
    return gw.fds() - sum(n for p, n in gw.sockets_by_peer().items() if p in upstreams)


HELD_PER_UPSTREAM = 4
"""Keep-alive connections a gateway may hold to one upstream when idle: its /health probes, the
replicas' scrape, the autopilot's and the history's (each /metrics, every second or two)."""


def _settled(peers: dict[int, int], upstreams: set[int]) -> bool:
    """No client connection left and no more to the upstreams than probes and scrapes hold."""
    held = sum(n for port, n in peers.items() if port in upstreams)
    clients = sum(n for port, n in peers.items() if port not in upstreams and port != 0)
    return clients == 0 and held <= HELD_PER_UPSTREAM * len(upstreams)


def check_resources(stack: Stack, run: Run) -> None:
    """Each gateway now, idle: no connection to a client left, to each upstream (the replicas,
    Redis) no more than its probes and scrapes hold, its other file descriptors as many as at
    its start; RSS within 10 % of its warm-up's."""
    upstreams = {s.port for s in stack.sims} | {stack.redis.port}
    settle_until = time.monotonic() + 10.0  # idle keep-alives close after 2 s: wait for that
    while time.monotonic() < settle_until and not all(
        _settled(g.sockets_by_peer(), upstreams) for g in stack.gateways
    ):
        time.sleep(0.25)
    fds0, rss0 = run.figures.get("fds_start", {}), run.figures.get("rss_warm_kib", {})
    fds1, socks = {}, {}
    for g in stack.gateways:
        peers = g.sockets_by_peer()
        held = sum(n for port, n in peers.items() if port in upstreams)
        clients = sum(n for port, n in peers.items() if port not in upstreams and port != 0)
        socks[g.incarnation] = {"to_upstreams": held, "to_clients": clients}
        fds1[g.incarnation] = g.fds() - held
        if clients:
            run.problems.append(f"{g.incarnation}: {clients} client connections left (a leak)")
        if held > HELD_PER_UPSTREAM * len(upstreams):
            run.problems.append(f"{g.incarnation}: {held} upstream connections idle (a leak)")
    rss1 = {g.incarnation: g.rss_kib() for g in stack.gateways}
    run.figures["fds_end_less_upstreams"], run.figures["rss_end_kib"] = fds1, rss1
    run.figures["sockets_end"] = socks
    for k, n in fds1.items():
        if k in fds0 and n > fds0[k]:
            run.problems.append(f"{k}: {n} fds at the end, {fds0[k]} at its start (a leak)")
    for k, kib in rss1.items():
        if k in rss0 and kib > rss0[k] * 1.10:
            run.problems.append(f"{k}: RSS {kib} KiB at the end, {rss0[k]} KiB after warm-up")


def check_ledger(stack: Stack, run: Run) -> None:
    """Stop the gateways (their counts come with their last log line) and compare."""
    stack.stop_gateways()
    counts = {}
    for g in stack.gateways:
        for r in range(g.run + 1):
            found = g.stopped_counts(r)
            if found is not None:
                counts[f"{g.name}#{r}"] = gateway_tally(found)
    lost = [e for e in run.entries if e.outcome == "lost"]
    run.figures["lost"] = [asdict(e) for e in lost[:20]]
    if lost:
        why = Counter(f"{e.kind} {e.status}: {e.detail[:80]}" for e in lost).most_common(5)
        run.problems.append(f"{len(lost)} requests lost: {why}")
    run.problems += disagreements(tallies(run.entries), counts)
    for p in stack.logs():
        if "Traceback" in p.read_text(errors="replace"):
            run.problems.append(f"a traceback in {p.name}")


def check_report(stack: Stack, run: Run) -> None:
    """The recording read end to end by `llmtop report`; which faults it names in 5 s."""
    done = subprocess.run(
        [sys.executable, "-m", "llmtop", "report", str(stack.recording), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        run.problems.append(f"llmtop report failed ({done.returncode}): {done.stderr[-300:]}")
        return
    report = json.loads(done.stdout)
    run.figures["report_polls"] = report["polls"]
    names = named(run.injections, report["findings"])
    run.figures["named"] = [
        {"kind": n.injection.kind, "at_s": round(n.injection.at_s, 1), "finding": n.finding,
         "delay_s": None if n.delay_s is None else round(n.delay_s, 2)}
        for n in names
    ]  # fmt: skip


def chaos(duration_s: float, out: Path, *, faults: bool = True, load_x: float = 1.5) -> Run:
    """One chaos run of `duration_s` seconds of load at `load_x` times the measured capacity
    (faults in rounds of 60 s; `faults=False`: the same stack and traffic, nothing injected,
    the healthy run the incident library holds the new findings' silence to)."""
    run = Run(duration_s)
    stack = Stack(out)
    rounds = max(1, min(2, int(duration_s // 120))) if faults else 0
    try:
        stack.start()
        tmux = shutil.which("tmux")
        if tmux:
            stack.start_tui(tmux)
        else:
            run.problems.append("no tmux: the TUI did not record")
        run.capacity_per_s = asyncio.run(calibrate(run, Router(stack.gateways), WARMUP_S))
        run.rate_per_s = load_x * run.capacity_per_s
        time.sleep(2.5)
        run.figures["fds_start"] = {g.incarnation: idle_fds(stack, g) for g in stack.gateways}
        run.figures["rss_warm_kib"] = {g.incarnation: g.rss_kib() for g in stack.gateways}
        asyncio.run(load(stack, run, duration_s - TAIL_S, rounds))
        for s in stack.sims:
            wait_ready(s.url + "/health", 30)
        at_rest(stack, run)
        status = stack.stop_tui()  # a client of the first gateway: gone before the count
        if tmux and status != 0:
            run.problems.append(f"the TUI exited {status}")
        check_resources(stack, run)
        check_ledger(stack, run)
        if tmux:
            check_report(stack, run)
    finally:
        stack.close()
        doc = {k: v for k, v in asdict(run).items() if k != "entries"}
        doc["outcomes"] = dict(run.outcomes())
        (out / "run.json").write_text(json.dumps(doc, default=str, indent=1))
    return run
