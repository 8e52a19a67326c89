"""`llmtop` / `llmtop top`: the TUI."""

from __future__ import annotations

import argparse

from llmtop.commands._common import flag
from llmtop.settings import MonitorSettings

HELP = "the TUI: engine, gateway, GPU and findings; change admission limits live (default)"


def add_monitor_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by every command that watches targets."""
    flag(
        p,
        MonitorSettings,
        "vllm_urls",
        "--vllm",
        metavar="URL",
        action="append",
        help="engine base URL (repeat for several engines)",
    )
    flag(
        p,
        MonitorSettings,
        "targets_file",
        "--targets",
        metavar="FILE",
        help="file of engine URLs, one a line with an optional name (re-read when it changes)",
    )
    flag(
        p,
        MonitorSettings,
        "prometheus_url",
        "--prometheus",
        metavar="URL",
        help="read every vLLM replica through this Prometheus HTTP API (PromQL)",
    )
    flag(
        p,
        MonitorSettings,
        "prometheus_selector",
        "--selector",
        metavar="SEL",
        help="with --prometheus: PromQL matchers of the vLLM series, e.g. '{job=\"vllm\"}'",
    )
    flag(
        p,
        MonitorSettings,
        "prometheus_window_s",
        "--prometheus-window",
        metavar="S",
        type=float,
        help="with --prometheus: range of rates and quantiles",
    )
    flag(
        p,
        MonitorSettings,
        "gateway_url",
        "--gateway",
        metavar="URL",
        help="llmtop gateway base URL ('off' to ignore)",
    )
    flag(
        p,
        MonitorSettings,
        "dcgm_url",
        "--dcgm",
        metavar="URL",
        help="dcgm-exporter /metrics URL for remote GPUs",
    )
    flag(
        p,
        MonitorSettings,
        "admin_token_file",
        "--admin-token-file",
        metavar="F",
        help="file with the gateway admin token (or LLMTOP_ADMIN_TOKEN)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_monitor_arguments(p)
    flag(
        p,
        MonitorSettings,
        "interval_s",
        "--interval",
        metavar="S",
        type=float,
        help="seconds between polls",
    )
    flag(
        p,
        MonitorSettings,
        "read_only",
        "--read-only",
        action="store_const",
        const=True,
        help="disable every key that changes something",
    )
    flag(
        p,
        MonitorSettings,
        "record",
        "--record",
        metavar="FILE",
        help="append every poll to a recording",
    )


def run(args: argparse.Namespace) -> int:
    """Start the TUI; a dead target does not stop it (the screen says DOWN and why)."""
    from llmtop.commands._common import load
    from llmtop.settings import HealthSettings
    from llmtop.sources.admin import AdminClient
    from llmtop.sources.fleet import make_collector
    from llmtop.sources.recording import Recorder, RecordingSource
    from llmtop.tui.app import run_tui

    monitor = load(MonitorSettings, args)
    health = load(HealthSettings, args)
    admin = AdminClient.from_settings(monitor)
    collector = make_collector(monitor, health)
    recorder = Recorder.from_settings(monitor)
    if monitor.record:
        recorder.open()
    return run_tui(
        RecordingSource(collector, recorder),
        monitor=monitor,
        health=health,
        admin=admin,
        recorder=recorder,
    )
