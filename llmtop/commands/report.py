"""`llmtop report`: a postmortem summary of a recording, a gateway's history or Prometheus'."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags
from llmtop.commands._past import add_past_arguments

HELP = "postmortem summary of a recording: peaks, findings, limit changes, charts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="recording (JSON lines, .gz allowed)")
    add_past_arguments(p)  # or --gateway URL / --prometheus URL --since 1h
    p.add_argument("--json", action="store_true", help="JSON instead of markdown")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write report.md or report.json and the PNG charts into DIR (else: print it)",
    )
    slo_flags(p)  # the charts' SLO line and the time back under it


def run(args: argparse.Namespace) -> int:
    import sys

    from llmtop.commands._common import load
    from llmtop.commands._past import fetch_past
    from llmtop.recording.postmortem import write_report
    from llmtop.settings import HealthSettings

    health = load(HealthSettings, args)
    name, recording = fetch_past(args) or (args.file, None)
    fmt = "json" if args.json else "md"
    for path in write_report(name, health, fmt=fmt, out=args.out, recording=recording):
        sys.stdout.write(f"{path}\n")
    return 0
