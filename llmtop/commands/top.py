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
    from llmtop.tui.launch import run_live

    return run_live(load(MonitorSettings, args), load(HealthSettings, args))
