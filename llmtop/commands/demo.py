"""`llmtop demo`: sim + gateway + load + TUI, on any laptop."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from llmtop.errors import UsageError

if TYPE_CHECKING:
    from llmtop.demo import Stack
    from llmtop.scenarios import Scenario

HELP = "the whole story on any laptop: simulated engine, gateway, load and the TUI"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from llmtop.scenarios import DEFAULT, SCENARIOS, describe_all

    p.epilog = f"Scenarios (--scenario):\n{describe_all()}\n\n{p.epilog or ''}"
    p.add_argument(
        "--scenario",
        default=DEFAULT,
        choices=list(SCENARIOS),
        metavar="NAME",
        help=f"load scenario (default: {DEFAULT}; listed below)",
    )
    p.add_argument("--headless", action="store_true", help="no screen: print the timeline")
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop after S seconds (headless default: one pass of the scenario)",
    )
    p.add_argument("--json", action="store_true", help="with --headless: one JSON document")
    p.add_argument(
        "--apply-cap",
        metavar="N[@T]",
        help="with --headless: set the gateway's max concurrency to N at T s"
        " (T defaults to the scenario's own moment)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the load (default 0)")
    p.add_argument("--record", metavar="FILE", help="record every poll to FILE")


def parse_cap(text: str, scenario: Scenario) -> tuple[int, float]:
    """'8@60' -> (8, 60.0); '8' -> (8, the scenario's cap time)."""
    n_s, sep, t_s = text.partition("@")
    try:
        n = int(n_s)
        t = float(t_s) if sep else scenario.cap_at_s
    except ValueError:
        raise UsageError(f"bad --apply-cap {text!r}: expected N@SECONDS, e.g. 8@60") from None
    if t is None:
        raise UsageError(f"--apply-cap {text!r}: scenario {scenario.name} has no cap time; use N@T")
    if n < 1 or t < 0:
        raise UsageError(f"bad --apply-cap {text!r}: need N >= 1 and T >= 0")
    return n, t


def run(args: argparse.Namespace) -> int:
    import importlib.util
    import logging
    import os
    import sys

    from llmtop.commands._common import load
    from llmtop.demo import start_stack
    from llmtop.scenarios import get_scenario
    from llmtop.settings import HealthSettings

    scenario = get_scenario(args.scenario)
    if not args.headless and (args.json or args.apply_cap):
        raise UsageError("--json and --apply-cap need --headless")
    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration must be > 0")
    cap = parse_cap(args.apply_cap, scenario) if args.apply_cap else None
    if args.record and importlib.util.find_spec("llmtop.sources.recording") is None:
        raise UsageError("recording is not built yet")
    if not args.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("llmtop demo needs a terminal; use --headless for a timeline")
    health = load(HealthSettings, args)
    stack = start_stack(scenario, health, record=args.record)
    # Cutting the load at the end makes the servers meet closed sockets mid-request; asyncio and
    # uvicorn log each one on stderr, which is noise in a demo and scribbles over the TUI.
    # LLMTOP_DEBUG=1 keeps them. (Set after start_stack: configuring uvicorn resets the levels.)
    if not os.environ.get("LLMTOP_DEBUG"):
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
    try:
        if args.headless:
            return _headless(args, stack, cap)
        return _interactive(args, stack)
    finally:
        stack.stop()


def _headless(args: argparse.Namespace, stack: Stack, cap: tuple[int, float] | None) -> int:
    import asyncio
    import contextlib
    import json
    import signal
    import sys

    from llmtop.core.loadstats import Slo, format_table, summarize, to_json
    from llmtop.demo import format_event, headless

    duration = args.duration if args.duration is not None else stack.scenario.cycle_s
    interrupted = False
    recorder = _recorder(stack)

    def emit(ev: dict[str, Any]) -> None:
        if not args.json:
            sys.stdout.write(format_event(ev) + "\n")
            sys.stdout.flush()

    async def main() -> tuple[list[dict[str, Any]], Any]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            nonlocal interrupted
            interrupted = True
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        return await headless(
            stack, duration, cap=cap, emit=emit, stop=stop, seed=args.seed, recorder=recorder
        )

    if not args.json:
        sys.stdout.write(stack.banner() + "\n")
        what = f"cap {cap[0]} at {cap[1]:g} s" if cap else "no cap (try --apply-cap)"
        sys.stdout.write(f"running headless for {duration:g} s, {what}\n")
        sys.stdout.flush()
    try:
        events, driver = asyncio.run(main())
    finally:
        if recorder is not None:
            recorder.close()
    slo = Slo(ttft_s=stack.health.ttft_slo_s, itl_s=stack.health.itl_slo_s)
    summary = summarize(driver.results, driver.runner.elapsed(), slo)
    fired = sorted({e["id"] for e in events if e["kind"] == "finding_fired"})
    cleared = sorted({e["id"] for e in events if e["kind"] == "finding_cleared"})
    if args.json:
        doc = {
            "scenario": stack.scenario.name,
            "sim_url": stack.sim.url,
            "gateway_url": stack.gateway.url,
            "duration_s": duration,
            "apply_cap": None if cap is None else {"max_concurrency": cap[0], "at_s": cap[1]},
            "interrupted": interrupted,
            "fired": fired,
            "cleared": cleared,
            "events": events,
            "load": to_json(summary),
        }
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        none = "none"
        sys.stdout.write(
            f"\nfindings fired: {', '.join(fired) or none}; cleared: {', '.join(cleared) or none}"
            f"\nload seen by the clients (through the gateway):\n{format_table(summary)}\n"
        )
    return 130 if interrupted else 0


def _recorder(stack: Stack) -> Any:
    """An open Recorder when --record was given, else None."""
    if not stack.monitor.record:
        return None
    from llmtop.sources.recording import Recorder

    recorder = Recorder.from_settings(stack.monitor)
    recorder.open()
    return recorder


def _interactive(args: argparse.Namespace, stack: Stack) -> int:
    import sys
    import threading

    from llmtop.demo import LoadThread
    from llmtop.sources.admin import AdminClient
    from llmtop.sources.collector import Collector
    from llmtop.sources.recording import Recorder, RecordingSource
    from llmtop.tui.app import LlmtopApp

    cap = stack.scenario.suggested_cap
    sys.stdout.write(f"{stack.banner()}\n  fix: press - down to {cap} (or :cap {cap}); q quits\n")
    sys.stdout.flush()
    load = LoadThread(stack.scenario, stack.gateway.url, seed=args.seed).start()
    timer: threading.Timer | None = None
    try:
        collector = Collector(stack.monitor, stack.health, max_num_seqs=stack.engine_max_num_seqs)
        recorder = _recorder(stack) or Recorder.from_settings(stack.monitor)
        app = LlmtopApp(
            RecordingSource(collector, recorder),
            monitor=stack.monitor,
            health=stack.health,
            admin=AdminClient(stack.gateway.url, source="tui"),
            recorder=recorder,
            title=f"llmtop demo · {stack.scenario.name} · sim :{stack.sim.port}"
            f" · gateway :{stack.gateway.port}",
        )
        if args.duration is not None:
            timer = threading.Timer(args.duration, lambda: app.call_from_thread(app.exit, 0))
            timer.daemon = True
            timer.start()
        code = app.run()
    finally:
        if timer is not None:
            timer.cancel()
        load.stop()
    sys.stdout.write(
        f"llmtop demo: stopped; sim {stack.sim.url} and gateway {stack.gateway.url} closed\n"
    )
    if load.error is not None and not isinstance(load.error, KeyboardInterrupt):
        sys.stderr.write(f"llmtop: demo load stopped early: {load.error}\n")
    return int(code or 0)
