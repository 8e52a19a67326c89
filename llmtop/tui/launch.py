"""The TUI's wiring for every command that opens it: the live app for `top` and `demo` (collector,
recorder, app; the what-if and admin client joined), the app on a recording for `replay`.
Every source and client is built here, so the app opens no connection and starts no thread;
what `top`'s first frame does not show is imported when used (test_import_hygiene.py).
"""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from llmtop.core.pipeline.span import span_text
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector, is_fleet
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.past import PastFetch, PastSource
from llmtop.tui.view.past import PastState
from llmtop.whatif.feed import with_whatif

if TYPE_CHECKING:
    from llmtop.recording.reader import Recording
    from llmtop.recording.replay import ReplaySource


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
    `app_class`: the demo passes its app (the live one plus a line saying what to do).

    The console starts with the past (`monitor.past_s`, `past_fetch`); `h` leaves the live
    app for a replay of it, and the replay's `h` comes back to a live app started anew, its
    past read again (it covers the time spent in the replay)."""
    recorder = Recorder.from_settings(monitor)
    if monitor.record:
        recorder.open()
    while True:
        if is_fleet(monitor):
            from llmtop.sources.fleet_collector import FleetCollector

            collector: Collector = FleetCollector(monitor, health, max_num_seqs=max_num_seqs)
        else:
            collector = Collector(monitor, health, max_num_seqs=max_num_seqs)
        past = with_past(collector, monitor)
        app = app_class(
            with_whatif(RecordingSource(past or collector, recorder), monitor, health),
            monitor=monitor,
            health=health,
            admin=AdminClient.from_settings(monitor),
            recorder=recorder,
            title=title,
            exit_after_s=exit_after_s,
            past=past,
            last_raw=partial(getattr, past or collector, "last_raw"),
        )
        recording = recorder.recording
        result = app.run()
        code = int(result or 0) if app.return_code is None else app.return_code
        if app.past_replay is None or past is None:
            return code
        if not replay_past(app.past_replay, past.state, health):
            return 0
        if recording and not recorder.recording:  # the live app's exit closed it: append
            recorder.open()


def with_past(collector: Collector, monitor: MonitorSettings) -> PastSource | None:
    """`collector` with the past in front (`past_fetch`); None under --no-past."""
    if monitor.past_s <= 0:
        return None
    source, fetch, error = past_fetch(monitor)
    urls = () if is_fleet(monitor) else monitor.vllm_urls
    return PastSource(
        collector, fetch, source=source, asked_s=monitor.past_s, live_urls=urls, error=error
    )


def past_fetch(monitor: MonitorSettings) -> tuple[str | None, PastFetch | None, str | None]:
    """Where the past comes from: (its name, how to read it, or why there is none). Prometheus
    when --prometheus is given (the fleet's store), else the gateway's history."""
    if monitor.prometheus_url:
        from llmtop.sources.prometheus_history import prometheus_history

        url = monitor.prometheus_url

        def from_prometheus(since: float) -> Awaitable[Recording]:
            return prometheus_history(
                url,
                since,
                selector=monitor.prometheus_selector,
                window_s=monitor.prometheus_window_s,
                replica_label=monitor.prometheus_replica_label,
            )

        return "prometheus", from_prometheus, None
    if not monitor.gateway_url:
        return None, None, "no gateway or --prometheus to read it from"
    from llmtop.sources.history import gateway_history

    gateway, token = monitor.gateway_url, monitor.admin_token

    def from_gateway(since: float) -> Awaitable[Recording]:
        return gateway_history(gateway, token, since)

    return "gateway", from_gateway, None


def replay_past(source: ReplaySource, state: PastState, health: HealthSettings) -> bool:
    """The past and what came since as a replay at its end (paused), made by the live app's
    `h` (`PastSource.replay`); True when its `h` asks to go back to live, False when it quit."""
    from llmtop.tui.replay_app import ReplayApp

    monitor = MonitorSettings(vllm_urls=("history",), gateway_url=None, read_only=True)
    times = source.recording.times
    title = f"llmtop: the last {span_text(times[-1] - times[0])} from {state.source} history"
    app = ReplayApp(
        source, monitor=monitor, health=health, title=f"{title} (h: back to live)", live_key=True
    )
    app.run()
    return app.back_to_live


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
