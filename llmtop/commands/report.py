"""`llmtop report`: a postmortem summary of a recording."""

from __future__ import annotations

import argparse

HELP = "postmortem summary of a recording: peaks, findings, limit changes, charts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="recording (JSON lines, .gz allowed)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="output format")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write report.md or report.json and the PNG charts into DIR (else: print it)",
    )


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from llmtop.commands._common import load
    from llmtop.core import report
    from llmtop.errors import UsageError
    from llmtop.replay import ReplaySource
    from llmtop.settings import HealthSettings
    from llmtop.sources.recording import read_recording

    health = load(HealthSettings, args)
    recording = read_recording(args.file)
    for warning in recording.warnings:
        sys.stderr.write(f"llmtop: warning: {warning}\n")
    replay = ReplaySource(recording, health)
    snapshots = replay.snapshots()
    header = recording.header
    r = report.build(
        snapshots,
        replay.events,
        source=Path(args.file).name,
        meta={"version": header.get("version"), "targets": header.get("targets", {})},
        ttft_slo_s=health.ttft_slo_s,
        live_findings=[recording.findings(i) for i in range(len(recording))],
    )
    charts = args.out is not None
    if args.format == "json":
        text = json.dumps(r.to_dict(with_series=False), indent=2) + "\n"
    else:
        text = report.to_markdown(r, charts=charts)
    if not charts:
        sys.stdout.write(text)
        return 0
    from llmtop.report_charts import write_charts

    out = Path(args.out)
    try:
        written = write_charts(r, out, ttft_slo_s=health.ttft_slo_s)
        name = out / ("report.json" if args.format == "json" else "report.md")
        name.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write the report into {out}: {e.strerror or e}") from None
    for path in (name, *written):
        sys.stdout.write(f"{path}\n")
    return 0
