"""`llmtop report`'s work: read a recording, replay it through the current rules, build the
report, and print it or write it with its charts into a folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llmtop.errors import UsageError
from llmtop.recording import report
from llmtop.recording.reader import Recording, read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.settings import HealthSettings


def build_report(
    path: str, health: HealthSettings, *, recording: Recording | None = None
) -> report.Report:
    """The report of one recording file, or of `recording` (a gateway's history, Prometheus'
    range: `path` then names it, and no live screen is compared); the reader's warnings go
    to stderr."""
    fetched = recording is not None
    if recording is None:
        recording = read_recording(path)
    for warning in recording.warnings:
        sys.stderr.write(f"llmtop: warning: {warning}\n")
    replay = ReplaySource(recording, health)
    header = recording.header
    live = None if fetched else [recording.findings(i) for i in range(len(recording))]
    return report.build(
        replay.snapshots(),
        replay.events,
        source=path if fetched else Path(path).name,
        meta={"version": header.get("version"), "targets": header.get("targets", {})},
        ttft_slo_s=health.slo.ttft_s,
        live_findings=live,
    )


def write_report(
    path: str,
    health: HealthSettings,
    *,
    fmt: str,
    out: str | None,
    recording: Recording | None = None,
) -> list[Path]:
    """Markdown or JSON on stdout (out=None), or report.md/.json and the PNG charts in `out`;
    returns the files written."""
    r = build_report(path, health, recording=recording)
    charts = out is not None
    if fmt == "json":
        text = json.dumps(r.to_dict(with_series=False), indent=2) + "\n"
    else:
        text = report.to_markdown(r, charts=charts)
    if out is None:
        sys.stdout.write(text)
        return []
    from llmtop.recording.charts import write_charts

    folder = Path(out)
    try:
        written = write_charts(r, folder, ttft_slo_s=health.slo.ttft_s)
        name = folder / ("report.json" if fmt == "json" else "report.md")
        name.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write the report into {folder}: {e.strerror or e}") from None
    return [name, *written]
