"""`llmtop snapshot`: one-shot health check for scripts and cron."""

from __future__ import annotations

import argparse

from llmtop.commands._common import load
from llmtop.commands.top import add_monitor_arguments
from llmtop.errors import NotBuiltError
from llmtop.settings import MonitorSettings

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


def run(args: argparse.Namespace) -> int:
    load(MonitorSettings, args)
    raise NotBuiltError("llmtop snapshot is not built yet")
