"""`llmtop replay`: the TUI on a recording."""

from __future__ import annotations

import argparse

from llmtop.errors import NotBuiltError

HELP = "open the TUI on a recording: pause, step, seek, speed x1..x60"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="recording (JSON lines, .gz allowed)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1..60)")


def run(args: argparse.Namespace) -> int:
    raise NotBuiltError("llmtop replay is not built yet")
