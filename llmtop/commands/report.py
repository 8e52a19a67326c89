"""`llmtop report`: a postmortem summary of a recording."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags

HELP = "postmortem summary of a recording: peaks, findings, limit changes, charts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="recording (JSON lines, .gz allowed)")
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
    from llmtop.recording.postmortem import write_report
    from llmtop.settings import HealthSettings

    health = load(HealthSettings, args)
    fmt = "json" if args.json else "md"
    for path in write_report(args.file, health, fmt=fmt, out=args.out):
        sys.stdout.write(f"{path}\n")
    return 0
