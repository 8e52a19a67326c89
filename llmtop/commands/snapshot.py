"""`llmtop snapshot`: one-shot health check for scripts and cron.

Scrapes every target at the start and at the end of the window, derives rates and quantiles
over it, and prints a summary (or one JSON object with --json). Exit status: 0 ok, 1 degraded,
2 critical, 3 unknown or unreachable.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from llmtop.commands._common import flag, load
from llmtop.commands.top import add_monitor_arguments
from llmtop.settings import HealthSettings, MonitorSettings

if TYPE_CHECKING:
    from llmtop.core.snapshot import Snapshot

HELP = "one-shot health check: scrape twice over a window, print findings (exit 0/1/2/3)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_monitor_arguments(p)
    p.add_argument(
        "--window",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between the two scrapes (default: 5)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    flag(
        p,
        HealthSettings,
        "ttft_slo_s",
        "--ttft-slo",
        metavar="S",
        type=float,
        help="TTFT p95 SLO in seconds",
    )
    flag(
        p,
        HealthSettings,
        "itl_slo_s",
        "--itl-slo",
        metavar="S",
        type=float,
        help="ITL p95 SLO in seconds",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json
    from dataclasses import replace

    from llmtop.core.summary import EXIT_CODES, to_json, to_text
    from llmtop.errors import UsageError

    monitor = load(MonitorSettings, args)
    health = load(HealthSettings, args)
    window = float(args.window)
    if not 0.5 <= window <= 3600:
        raise UsageError("--window must be between 0.5 and 3600 seconds")
    # One look over one window: a finding fires and clears on what the window shows.
    health = replace(health, fire_after_s=0.0, clear_after_s=0.0, window_s=window)
    snap, fleet = asyncio.run(_take(monitor, health, window))
    if args.json:
        print(json.dumps(to_json(snap) | fleet, indent=2))
    else:
        print(to_text(snap, window))
    return EXIT_CODES[snap.status]


async def _take(
    monitor: MonitorSettings, health: HealthSettings, window: float
) -> tuple[Snapshot, dict[str, Any]]:
    """The snapshot, and {"fleet": ...} when watching a fleet (else {})."""
    import asyncio
    import time

    from llmtop.sources.fleet import fleet_json_of, make_collector

    timeout = min(5.0, max(1.0, window * 0.8))
    collector = make_collector(monitor, health, window_s=window, timeout_s=timeout)
    try:
        start = time.monotonic()
        first = await collector.poll()
        if not any(e.up for e in first.engines):
            return first, fleet_json_of(collector)  # nothing answers: say so now
        await asyncio.sleep(max(0.0, window - (time.monotonic() - start)))
        return await collector.poll(), fleet_json_of(collector)
    finally:
        await collector.aclose()
