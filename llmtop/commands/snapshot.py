"""`llmtop snapshot`: one-shot health check for scripts and cron. Polls every target across the
window, prints the last poll's figures and verdict and any finding that held only earlier (--json:
one object). Exit 0 ok, 1 degraded, 2 critical, 3 unknown or unreachable (as monitoring plugins
use them); 64 bad usage or config (EX_USAGE), 70 any other error (EX_SOFTWARE), so a cron job
tells a verdict from a mistake."""

from __future__ import annotations

import argparse

from llmtop.commands._common import flag, load, slo_flags
from llmtop.commands.top import add_monitor_arguments
from llmtop.settings import HealthSettings, MonitorSettings

HELP = "one-shot health check: poll across a window, print the verdict (exit 0/1/2/3; 64 usage)"

USAGE_EXIT_CODE = 64
"""Bad usage or config: apart from the verdicts 0..3 (EX_USAGE of sysexits.h)."""
ERROR_EXIT_CODE = 70
"""Any other error before a verdict (EX_SOFTWARE); an unreachable target is the verdict 3."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_monitor_arguments(p)
    p.add_argument(
        "--window-s",
        dest="window",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds to watch (default: 5)",
    )
    flag(
        p,
        MonitorSettings,
        "interval_s",
        "--interval-s",
        metavar="S",
        type=float,
        help="seconds between polls",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    slo_flags(p)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from llmtop.core.output.summary import EXIT_CODES, to_json, to_text
    from llmtop.core.pipeline.verdict import MAX_WINDOW_S
    from llmtop.errors import UsageError
    from llmtop.sources.collector import is_fleet
    from llmtop.sources.fleet_collector import take_fleet_snapshot
    from llmtop.sources.window_reader import take_snapshot

    monitor = load(MonitorSettings, args)
    window = float(args.window)
    if not 0.5 <= window <= MAX_WINDOW_S:
        raise UsageError(f"--window-s must be between 0.5 and {MAX_WINDOW_S:g} seconds")
    if not 0.1 <= monitor.interval_s <= MAX_WINDOW_S:
        raise UsageError(f"--interval-s must be between 0.1 and {MAX_WINDOW_S:g} seconds")
    health = load(HealthSettings, args)
    if is_fleet(monitor):  # several engines: each replica's figures and findings too
        report, fleet = asyncio.run(take_fleet_snapshot(monitor, health, window))
    else:
        report, fleet = asyncio.run(take_snapshot(monitor, health, window)), {}
    print(json.dumps(to_json(report) | fleet, indent=2) if args.json else to_text(report))
    return EXIT_CODES[report.status]
