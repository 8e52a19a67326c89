"""`llmtop demo`: sim + gateway + load + TUI, on any laptop."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags
from llmtop.errors import UsageError

HELP = "the whole story on any laptop: simulated engine, gateway, load and the TUI"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from llmtop.demo.scenarios import DEFAULT, SCENARIOS, describe_all

    p.epilog = f"Scenarios (--scenario):\n{describe_all()}\n\n{p.epilog or ''}"
    p.add_argument(
        "--scenario",
        default=DEFAULT,
        choices=list(SCENARIOS),
        metavar="NAME",
        help=f"load scenario (default: {DEFAULT}; listed below)",
    )
    p.add_argument("--headless", action="store_true", help="no screen: print the timeline")
    until = "stop after S seconds (headless default: one pass of the scenario)"
    p.add_argument("--duration-s", dest="duration", type=float, metavar="S", help=until)
    p.add_argument("--json", action="store_true", help="with --headless: one JSON document")
    p.add_argument(
        "--apply-cap",
        metavar="N|auto[@T]",
        help="with --headless: set the gateway's max concurrency to N at T s; auto: to the cap"
        " the active finding suggests at T (T defaults to the scenario's own moment)",
    )
    speaks = "the engine whose /metrics the simulated engine speaks (as `llmtop sim --dialect`)"
    p.add_argument("--dialect", default="vllm", metavar="ENGINE", help=speaks)
    p.add_argument("--seed", type=int, default=0, help="seed of the load (default 0)")
    p.add_argument("--record", metavar="FILE", help="record every poll to FILE")
    slo_flags(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from llmtop.commands._common import load
    from llmtop.core.dialects.catalog import dialect_of
    from llmtop.demo.headless import parse_cap, run_headless
    from llmtop.demo.scenarios import get_scenario
    from llmtop.demo.stack import demo_stack
    from llmtop.settings import HealthSettings

    scenario = get_scenario(args.scenario)
    try:
        dialect = dialect_of(args.dialect).kind
    except UsageError as e:
        raise UsageError(f"--dialect: {e}") from None
    if not args.headless and (args.json or args.apply_cap):
        raise UsageError("--json and --apply-cap need --headless")
    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration-s must be > 0")
    cap = parse_cap(args.apply_cap, scenario) if args.apply_cap else None
    if not args.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("llmtop demo needs a terminal; use --headless for a timeline")
    health = load(HealthSettings, args)
    with demo_stack(scenario, health, record=args.record, dialect=dialect) as stack:
        if args.headless:
            return run_headless(stack, args.duration, cap, seed=args.seed, as_json=args.json)
        from functools import partial

        from llmtop.demo.interactive import run_interactive
        from llmtop.tui.demo_app import DemoApp
        from llmtop.tui.launch import run_live

        tui = partial(run_live, app_class=DemoApp)
        return run_interactive(stack, seed=args.seed, duration_s=args.duration, tui=tui)
