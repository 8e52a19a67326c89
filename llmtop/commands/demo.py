"""`llmtop demo`: sim + gateway + load + TUI, on any laptop."""

from __future__ import annotations

import argparse

from llmtop.errors import NotBuiltError

HELP = "the whole story on any laptop: simulated engine, gateway, load and the TUI"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="story", help="load scenario (default: story)")
    p.add_argument("--headless", action="store_true", help="no screen: print the timeline")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--json", action="store_true", help="with --headless: JSON output")
    p.add_argument(
        "--apply-cap", metavar="N@T", help="with --headless: set max concurrency N at T s"
    )
    p.add_argument("--record", metavar="FILE", help="record the run")


def run(args: argparse.Namespace) -> int:
    raise NotBuiltError("llmtop demo is not built yet")
