"""The TUI's wiring for every command that opens it: the live app for `top` and `demo` (collector,
recorder, app; the what-if and admin client joined), the app on a recording for `replay`.
Every source and client is built here, so the app opens no connection and starts no thread;
what `top`'s first frame does not show is imported when used (test_import_hygiene.py).
"""

from __future__ import annotations

from pathlib import Path

from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector, is_fleet
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.whatif.feed import with_whatif


def run_live(
    monitor: MonitorSettings,
    health: HealthSettings,
    *,
    max_num_seqs: int | None = None,
    title: str | None = None,
    exit_after_s: float | None = None,
    app_class: type[LlmtopApp] = LlmtopApp,
) -> int:
    """Poll the targets in the TUI until `q` (or `exit_after_s`); every poll goes through the
    recorder, which writes when --record or the `r` key opened it. Returns the exit code.
    `app_class`: the demo passes its app (the live one plus a line saying what to do)."""
    if is_fleet(monitor):
        from llmtop.sources.fleet_collector import FleetCollector

        collector: Collector = FleetCollector(monitor, health, max_num_seqs=max_num_seqs)
    else:
        collector = Collector(monitor, health, max_num_seqs=max_num_seqs)
    recorder = Recorder.from_settings(monitor)
    if monitor.record:
        recorder.open()
    app = app_class(
        with_whatif(RecordingSource(collector, recorder), monitor, health),
        monitor=monitor,
        health=health,
        admin=AdminClient.from_settings(monitor),
        recorder=recorder,
        title=title,
        exit_after_s=exit_after_s,
    )
    result = app.run()
    return int(result or 0) if app.return_code is None else app.return_code


def run_replay(path: str, health: HealthSettings, *, speed: float, paused: bool) -> int:
    """Open the TUI on a recording (read-only); warnings about the file go to stderr first."""
    import sys

    from llmtop.recording.replay import open_replay
    from llmtop.tui.replay_app import ReplayApp

    source, monitor, warnings = open_replay(path, health, speed=speed, paused=paused)
    for warning in warnings:
        sys.stderr.write(f"llmtop: warning: {warning}\n")
    app = ReplayApp(
        source, monitor=monitor, health=health, title=f"llmtop replay: {Path(path).name}"
    )
    result = app.run()
    return int(result or 0) if app.return_code is None else app.return_code
