"""`llmtop demo`: the simulated engine, the gateway, a scenario's load and a monitor in one
process, so quitting leaves no orphan and frees every port. The sim and the gateway run each on
a thread and event loop of its own (`ServerThread`, free ports, printed); the load is a
`ScenarioDriver`, on a `LoadThread` with a screen, in the headless loop without (demo.headless).
The gateway keeps its history as `llmtop gateway` does, in a temporary folder removed on the way
out, so the console's past (its header, the `h` key) comes from it as it would in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.demo.scenarios import Phase, Scenario
from llmtop.load.drivers import ClosedLoop
from llmtop.load.runner import Runner, Shape
from llmtop.load.stats import RequestResult
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
    dialect: str = "vllm"
    """The engine whose /metrics the sim speaks (`llmtop demo --dialect`)."""
    history_dir: str | None = None
    """The gateway's history folder (temporary: removed by `stop`)."""

    def stop(self) -> None:
        """Gateway first (it holds connections to the sim, and closes its history), then the
        sim; then the history's folder goes."""
        try:
            self.gateway.stop()
            self.sim.stop()
        finally:
            if self.history_dir is not None:
                shutil.rmtree(self.history_dir, ignore_errors=True)

    def banner(self) -> str:
        """What was started where, for the terminal before the TUI takes it."""
        from llmtop.core.dialects.catalog import dialect_of

        s = self.scenario
        d = dialect_of(self.dialect)
        speaks = "" if d.kind == "vllm" else f" in {d.title}'s names"
        return "\n".join(
            [
                f"llmtop demo: scenario '{s.name}' ({s.description})",
                f"  simulated {d.title} ({s.sim.get('profile', 'seed')}) {self.sim.url}"
                f"  (/v1, /metrics, /dcgm/metrics{speaks})",
                f"  llmtop gateway        {self.gateway.url}  (max_concurrency"
                f" {self.engine_max_num_seqs} = the engine's own --max-num-seqs: no cap yet)",
                f"  load                  {', '.join(s.stream_names())} -> the gateway",
                f"  try: llmtop load --url {self.gateway.url} --concurrency 4 --requests 8",
            ]
        )


def start_stack(
    scenario: Scenario,
    health: HealthSettings,
    *,
    record: str | None = None,
    dialect: str = "vllm",
) -> Stack:
    """Start the sim (the scenario's profile, its /metrics in `dialect`'s names) and an
    uncapped gateway keeping its history in a temporary folder, on free ports."""
    from llmtop.gateway.server.app import create_app as gateway_app
    from llmtop.gateway.server.history_loop import keeper_of
    from llmtop.sim.profiles import get_profile
    from llmtop.sim.server import create_app as sim_app

    sim_settings = SimSettings(port=0, dialect=dialect, **scenario.sim)
    max_seqs = sim_settings.max_num_seqs or get_profile(sim_settings.profile).max_num_seqs
    sim = ServerThread(sim_app(sim_settings)).start()
    history_dir = tempfile.mkdtemp(prefix="llmtop-demo-")
    try:
        gw_settings = GatewaySettings(
            upstream=sim.url,
            listen="127.0.0.1:0",
            max_concurrency=max_seqs,
            max_queue=GATEWAY_QUEUE,
            queue_timeout_s=GATEWAY_QUEUE_TIMEOUT_S,
            slo=health.slo,  # the one SLO: what the screen judges is what the gateway admits to
            history_dir=history_dir,
        )
        keeper = keeper_of(gw_settings, None)
        gateway = ServerThread(gateway_app(gw_settings, history=keeper))
        keeper.targets["gateway"] = gateway.url  # bound now; its polls start with the server
        gateway.start()
    except BaseException:
        sim.stop()
        shutil.rmtree(history_dir, ignore_errors=True)
        raise
    monitor = MonitorSettings(
        vllm_urls=(sim.url,),
        gateway_url=gateway.url,
        dcgm_url=f"{sim.url}/dcgm/metrics",
        nvml=False,
        record=record,
    )
    health = dataclasses.replace(health, **scenario.health)
    return Stack(scenario, sim, gateway, max_seqs, monitor, health, dialect, history_dir)


@contextlib.contextmanager
def demo_stack(
    scenario: Scenario,
    health: HealthSettings,
    *,
    record: str | None = None,
    dialect: str = "vllm",
) -> Iterator[Stack]:
    """`start_stack`, quiet server logs unless LLMTOP_DEBUG=1, and stop it on the way out."""
    stack = start_stack(scenario, health, record=record, dialect=dialect)
    # Cutting the load at the end makes the servers meet closed sockets mid-request; asyncio and
    # uvicorn log each one on stderr, which is noise in a demo and scribbles over the TUI.
    # LLMTOP_DEBUG=1 keeps them. (Set after start_stack: configuring uvicorn resets the levels.)
    if not os.environ.get("LLMTOP_DEBUG"):
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
    try:
        yield stack
    finally:
        stack.stop()


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
        )
        self._on_phase = on_phase
        self.phase_index = -1
        self._loops: dict[str, ClosedLoop] = {}
        """The current loop of each stream (a new one when a phase changes its shape)."""
        self._all: list[ClosedLoop] = []

    @property
    def results(self) -> list[RequestResult]:
        """The results kept so far (none when keep_results is off: an endless demo)."""
        return self.runner.results

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
