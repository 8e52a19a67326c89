"""`llmtop replay`: the TUI on a recording."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags

HELP = "open the TUI on a recording: pause, step, seek, speed x1..x60"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="recording (JSON lines, .gz allowed)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1..60)")
    p.add_argument("--paused", action="store_true", help="start paused on the first poll")
    slo_flags(p)


def run(args: argparse.Namespace) -> int:
    from llmtop.commands._common import load
    from llmtop.settings import HealthSettings
    from llmtop.tui.launch import run_replay

    health = load(HealthSettings, args)
    return run_replay(args.file, health, speed=args.speed, paused=args.paused)
