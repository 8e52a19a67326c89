"""`llmtop report`: a postmortem summary of a recording."""

from __future__ import annotations

import argparse

from llmtop.errors import NotBuiltError

HELP = "postmortem summary of a recording: peaks, findings, limit changes, charts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="recording (JSON lines, .gz allowed)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="output format")
    p.add_argument("--out", metavar="DIR", help="write report and PNG charts into DIR")


def run(args: argparse.Namespace) -> int:
    raise NotBuiltError("llmtop report is not built yet")
