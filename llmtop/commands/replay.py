"""`llmtop replay`: the TUI on a recording, a gateway's history or Prometheus'."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags
from llmtop.commands._past import add_past_arguments

HELP = "open the TUI on a recording: pause, step, seek, speed x1..x60"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="recording (JSON lines, .gz allowed)")
    add_past_arguments(p)  # or --gateway URL / --prometheus URL --since 30m
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1..60)")
    p.add_argument("--paused", action="store_true", help="start paused on the first poll")
    slo_flags(p)


def run(args: argparse.Namespace) -> int:
    import tempfile

    from llmtop.commands._common import load
    from llmtop.commands._past import fetch_past
    from llmtop.recording.writer import save_recording
    from llmtop.settings import HealthSettings
    from llmtop.tui.launch import run_replay

    health = load(HealthSettings, args)
    past = fetch_past(args)
    if past is None:
        return run_replay(args.file, health, speed=args.speed, paused=args.paused)
    name, recording = past  # the TUI replays a file: the fetched past, saved for its run
    with tempfile.TemporaryDirectory(prefix="llmtop-") as folder:
        path = save_recording(recording, folder, name)
        return run_replay(str(path), health, speed=args.speed, paused=args.paused)
