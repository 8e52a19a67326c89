"""`llmtop replay`: the TUI on a recording."""

from __future__ import annotations

import argparse

HELP = "open the TUI on a recording: pause, step, seek, speed x1..x60"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="recording (JSON lines, .gz allowed)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1..60)")
    p.add_argument("--paused", action="store_true", help="start paused on the first poll")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from llmtop.commands._common import load
    from llmtop.errors import UsageError
    from llmtop.replay import SPEEDS, ReplaySource
    from llmtop.settings import HealthSettings, MonitorSettings
    from llmtop.sources.recording import read_recording

    if not SPEEDS[0] <= args.speed <= SPEEDS[-1]:
        raise UsageError(f"--speed {args.speed:g}: must be between 1 and 60")
    health = load(HealthSettings, args)
    recording = read_recording(args.file)
    for warning in recording.warnings:
        sys.stderr.write(f"llmtop: warning: {warning}\n")
    source = ReplaySource(recording, health, speed=args.speed, paused=args.paused)
    targets = recording.header.get("targets") or {}
    vllm = targets.get("vllm") or ["recorded"]
    monitor = MonitorSettings(
        vllm_urls=tuple(str(u) for u in vllm),
        gateway_url=targets.get("gateway"),
        interval_s=float(recording.header.get("interval_s") or 1.0),
        read_only=True,
    )
    from llmtop.tui.screens.replay import ReplayApp

    app = ReplayApp(
        source, monitor=monitor, health=health, title=f"llmtop replay: {Path(args.file).name}"
    )
    result = app.run()
    return int(result or 0) if app.return_code is None else app.return_code
