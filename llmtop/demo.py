"""`llmtop demo`: the simulated engine, the gateway in front of it, a scenario's load, and a
monitor, all in this one process so that quitting leaves no orphan and frees every port.

The sim and the gateway each run on their own thread and event loop (`ServerThread`, port 0:
free ports, printed). The load is a `ScenarioDriver`: closed-loop streams against the gateway
whose concurrency follows the scenario's phases. The TUI runs the load on a `LoadThread`; the
headless run drives load and polls in one loop and returns a timeline of events.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmtop.core.loadstats import RequestResult
from llmtop.core.snapshot import Finding, Snapshot
from llmtop.loadgen import ClosedLoop, Runner, Shape
from llmtop.scenarios import Phase, Scenario
from llmtop.serving import ServerThread
from llmtop.settings import GatewaySettings, HealthSettings, MonitorSettings, SimSettings

GATEWAY_QUEUE = 512
"""The demo gateway's max_queue: room for every stream of every scenario, so the cap queues."""
GATEWAY_QUEUE_TIMEOUT_S = 180.0
"""Long enough that the story's 4,000-token prompts wait in the gateway instead of timing out."""
LOAD_REQUEST_CAP = 1_000_000
"""The demo's load is bounded by its duration or the user's q; this is the backstop."""


@dataclass
class Stack:
    """The servers of one demo; `stop` is idempotent and frees both ports."""

    scenario: Scenario
    sim: ServerThread
    gateway: ServerThread
    engine_max_num_seqs: int
    monitor: MonitorSettings
    health: HealthSettings

    def stop(self) -> None:
        """Gateway first (it holds connections to the sim), then the sim."""
        self.gateway.stop()
        self.sim.stop()

    def banner(self) -> str:
        """What was started where, for the terminal before the TUI takes it."""
        s = self.scenario
        return "\n".join(
            [
                f"llmtop demo: scenario '{s.name}' ({s.description})",
                f"  simulated vLLM ({s.sim.get('profile', 'seed')}) {self.sim.url}"
                f"  (/v1, /metrics, /dcgm/metrics)",
                f"  llmtop gateway        {self.gateway.url}  (max_concurrency"
                f" {self.engine_max_num_seqs} = the engine's own --max-num-seqs: no cap yet)",
                f"  load                  {', '.join(s.stream_names())} -> the gateway",
                f"  try: llmtop load --url {self.gateway.url} --concurrency 4 --requests 8",
            ]
        )


def start_stack(scenario: Scenario, health: HealthSettings, *, record: str | None = None) -> Stack:
    """Start the sim (the scenario's profile) and an uncapped gateway on free ports."""
    from llmtop.gateway.app import create_app as gateway_app
    from llmtop.sim.profiles import get_profile
    from llmtop.sim.server import create_app as sim_app

    sim_settings = SimSettings(port=0, **scenario.sim)
    max_seqs = sim_settings.max_num_seqs or get_profile(sim_settings.profile).max_num_seqs
    sim = ServerThread(sim_app(sim_settings)).start()
    try:
        gw_settings = GatewaySettings(
            upstream=sim.url,
            listen="127.0.0.1:0",
            max_concurrency=max_seqs,
            max_queue=GATEWAY_QUEUE,
            queue_timeout_s=GATEWAY_QUEUE_TIMEOUT_S,
        )
        gateway = ServerThread(gateway_app(gw_settings)).start()
    except BaseException:
        sim.stop()
        raise
    monitor = MonitorSettings(
        vllm_urls=(sim.url,),
        gateway_url=gateway.url,
        dcgm_url=f"{sim.url}/dcgm/metrics",
        nvml=False,
        record=record,
    )
    health = dataclasses.replace(health, **scenario.health)
    return Stack(scenario, sim, gateway, max_seqs, monitor, health)


class ScenarioDriver:
    """A scenario's streams as closed loops against `url`, resized at each phase change."""

    def __init__(
        self,
        scenario: Scenario,
        url: str,
        *,
        seed: int = 0,
        keep_results: bool = True,
        on_phase: Callable[[float, int, Phase], None] | None = None,
        on_result: Callable[[RequestResult], None] | None = None,
    ) -> None:
        self.scenario = scenario
        # Connections for every stream at its peak at once: a shrinking stream's last requests
        # overlap the next phase's, and a request waiting for a pooled connection would count
        # that wait as TTFT.
        peak = sum(
            max(s.concurrency for p in scenario.phases for s in p.streams if s.name == name)
            for name in scenario.stream_names()
        )
        self.runner = Runner(
            url,
            max_requests=LOAD_REQUEST_CAP,
            max_connections=peak + 8,
            retry_429=True,
            seed=seed,
            keep_results=keep_results,
            on_result=self._record,
        )
        self.counts = {"ok": 0, "rejected": 0, "error": 0, "http_error": 0, "cut": 0}
        self._on_phase = on_phase
        self._on_result = on_result
        self.phase_index = -1
        self._loops: dict[str, ClosedLoop] = {}
        """The current loop of each stream (a new one when a phase changes its shape)."""
        self._all: list[ClosedLoop] = []

    @property
    def results(self) -> list[RequestResult]:
        """The results kept so far (none when keep_results is off: an endless demo)."""
        return self.runner.results

    def _record(self, r: RequestResult) -> None:
        self.counts[r.outcome] += 1
        if self._on_result is not None:
            self._on_result(r)

    def stop(self) -> None:
        """End the load: no new requests, those in flight are cut."""
        self.runner.stop()

    async def run(self, duration_s: float | None = None) -> None:
        """Drive the phases until stopped (or `duration_s`); closes the client on the way out."""
        runner = self.runner
        try:
            await runner.resolve_model()
            runner.mark_start()
            while not runner.stopped.is_set():
                t = runner.elapsed()
                if duration_s is not None and t >= duration_s:
                    break
                self._apply(t)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(runner.stopped.wait(), 0.25)
        finally:
            runner.stop()
            for loop in self._all:
                await loop.wait()
            await runner.aclose()

    def _apply(self, t: float) -> None:
        i, phase = self.scenario.at(t)
        if i == self.phase_index:
            return
        self.phase_index = i
        on = {s.name: s for s in phase.streams}
        for name in self.scenario.stream_names():
            s = on.get(name)
            loop = self._loops.get(name)
            if s is not None:
                shape = Shape(s.prompt_tokens, s.output_tokens, priority=s.priority)
                if loop is None or loop.shape != shape:
                    if loop is not None:
                        loop.set_concurrency(0)
                    loop = self._loops[name] = ClosedLoop(self.runner, shape)
                    self._all.append(loop)
                loop.set_concurrency(s.concurrency)
            elif loop is not None:
                loop.set_concurrency(0)
        if self._on_phase is not None:
            self._on_phase(t, i, phase)


class LoadThread:
    """A ScenarioDriver on its own thread and event loop (the TUI owns the main one)."""

    def __init__(self, scenario: Scenario, url: str, *, seed: int = 0) -> None:
        self._scenario = scenario
        self._url = url
        self._seed = seed
        self._driver: ScenarioDriver | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="demo-load", daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self._loop = asyncio.get_running_loop()
            self._driver = ScenarioDriver(
                self._scenario, self._url, seed=self._seed, keep_results=False
            )
            self._ready.set()
            await self._driver.run()

        try:
            asyncio.run(go())
        except BaseException as e:  # reported by the caller, never a traceback on the TUI
            self.error = e
        finally:
            self._ready.set()

    @property
    def sent(self) -> int:
        """Requests sent so far."""
        return self._driver.runner.issued if self._driver is not None else 0

    def start(self) -> LoadThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cut the load and wait for the thread; safe to call twice."""
        loop, driver = self._loop, self._driver
        if loop is not None and driver is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(driver.stop)
        self._thread.join(timeout_s)


# ---- the headless timeline -------------------------------------------------------------------


def finding_events(
    t: float, before: dict[str, Finding], now: tuple[Finding, ...]
) -> list[dict[str, Any]]:
    """finding_fired / finding_cleared events between two polls' findings."""
    events: list[dict[str, Any]] = []
    current = {f.id: f for f in now}
    for fid, f in current.items():
        if fid not in before:
            events.append(
                {
                    "t": t,
                    "kind": "finding_fired",
                    "id": fid,
                    "severity": f.severity,
                    "bottleneck": f.bottleneck,
                    "summary": f.summary,
                    "action": f.action,
                }
            )
    for fid, f in before.items():
        if fid not in current:
            events.append({"t": t, "kind": "finding_cleared", "id": fid, "summary": f.summary})
    return events


def figures(t: float, snap: Snapshot) -> dict[str, Any]:
    """The key figures of one poll (None = unknown)."""
    e = snap.engines[0] if snap.engines else None
    g = snap.gateway
    return {
        "t": t,
        "kind": "figures",
        "status": snap.status,
        "running": e.running if e else None,
        "waiting": e.waiting if e else None,
        "kv_cache_usage_frac": e.kv_cache_usage_frac if e else None,
        "ttft_p95_s": e.ttft_p95_s if e else None,
        "decode_tok_per_s": e.decode_tok_per_s if e else None,
        "preemptions_per_s": e.preemptions_per_s if e else None,
        "gateway_queued": g.queued if g else None,
        "gateway_in_flight": g.in_flight if g else None,
        "gateway_max_concurrency": g.max_concurrency if g else None,
        "gateway_ttft_p95_s": g.ttft_p95_s if g else None,
        "findings": [f.id for f in snap.findings],
    }


def _n(v: float | None, fmt: str = ".0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def format_event(ev: dict[str, Any]) -> str:
    """One event as a line (or two) for a terminal or a CI log."""
    head = f"t={ev['t']:6.1f}s  "
    kind = ev["kind"]
    if kind == "phase":
        return f"{head}phase    {ev['name']}: {ev['note']}"
    if kind == "finding_fired":
        return (
            f"{head}FIRED    {ev['id']} [{ev['severity']}/{ev['bottleneck']}] {ev['summary']}\n"
            f"{' ' * 19}action: {ev['action']}"
        )
    if kind == "finding_cleared":
        return f"{head}CLEARED  {ev['id']}"
    if kind == "cap_applied":
        return f"{head}CAP      gateway max_concurrency {ev['from']} -> {ev['max_concurrency']}"
    if kind == "figures":
        kv = ev["kv_cache_usage_frac"]
        ttft = ev["ttft_p95_s"]
        return (
            f"{head}figures  running {_n(ev['running'])}  waiting {_n(ev['waiting'])}"
            f"  kv {'n/a' if kv is None else f'{kv:.0%}'}"
            f"  ttft_p95 {'n/a' if ttft is None else f'{ttft:.2f}s'}"
            f"  decode {_n(ev['decode_tok_per_s'])} tok/s"
            f"  gateway {_n(ev['gateway_queued'])} queued / {_n(ev['gateway_in_flight'])}"
            f" in flight (cap {_n(ev['gateway_max_concurrency'])})"
            f"  [{ev['status']}{': ' + ', '.join(ev['findings']) if ev['findings'] else ''}]"
        )
    return f"{head}{kind}  {ev}"


async def headless(
    stack: Stack,
    duration_s: float,
    *,
    cap: tuple[int, float] | None = None,
    figures_every_s: float = 5.0,
    emit: Callable[[dict[str, Any]], None] | None = None,
    stop: asyncio.Event | None = None,
    seed: int = 0,
    recorder: Any = None,
) -> tuple[list[dict[str, Any]], ScenarioDriver]:
    """Run the scenario for `duration_s`, polling the monitor each interval; returns the events
    (phase, finding_fired, finding_cleared, cap_applied, figures) and the driver (load results).
    A `recorder` (sources.recording.Recorder) gets every poll."""
    from llmtop.sources.admin import AdminClient
    from llmtop.sources.collector import Collector

    events: list[dict[str, Any]] = []

    def add(ev: dict[str, Any]) -> None:
        events.append(ev)
        if emit is not None:
            emit(ev)

    start = time.monotonic()

    def on_phase(_: float, i: int, p: Phase) -> None:
        add({"t": round(time.monotonic() - start, 1), "kind": "phase", "index": i,
             "name": p.name, "note": p.note})  # fmt: skip

    driver = ScenarioDriver(stack.scenario, stack.gateway.url, seed=seed, on_phase=on_phase)
    collector = Collector(stack.monitor, stack.health, max_num_seqs=stack.engine_max_num_seqs)
    admin = AdminClient(stack.gateway.url, source="demo")
    stop = stop or asyncio.Event()
    load = asyncio.ensure_future(driver.run(duration_s))
    active: dict[str, Finding] = {}
    next_figures = 0.0
    interval = stack.monitor.interval_s
    last: tuple[float, Snapshot] | None = None
    shown = -1.0
    try:
        tick = start
        while not stop.is_set() and not load.done():
            t = round(time.monotonic() - start, 1)
            if t >= duration_s:
                break
            snap = await collector.poll()
            if recorder is not None:
                recorder.write(collector.last_raw, snap.findings)
            for ev in finding_events(t, active, snap.findings):
                add(ev)
            active = {f.id: f for f in snap.findings}
            last = (t, snap)
            if cap is not None and t >= cap[1]:
                before = snap.gateway.max_concurrency if snap.gateway else None
                await admin.set_limits(max_concurrency=cap[0])
                add({"t": t, "kind": "cap_applied", "max_concurrency": cap[0], "from": before})
                cap = None
            if t >= next_figures:
                add(figures(t, snap))
                shown = t
                next_figures += figures_every_s
            tick += interval
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, tick - time.monotonic()))
        if last is not None and last[0] != shown:
            add(figures(*last))  # the state the run ended in
    finally:
        driver.stop()
        await load
        await collector.aclose()
        await admin.aclose()
    return events, driver
