"""`llmtop` / `llmtop top`: the TUI."""

from __future__ import annotations

import argparse

from llmtop.commands._common import Flag, flags, kube_flags, slo_flags
from llmtop.core.pipeline.span import parse_span
from llmtop.settings import MonitorSettings

HELP = "the TUI: engine, gateway, GPU and findings; change admission limits live (default)"


MONITOR_FLAGS: tuple[Flag, ...] = (
    ("vllm_urls", "--vllm", "engine base URL (repeat for several engines)", {
        "metavar": "URL", "action": "append"}),
    ("vllm_urls", "--engine", "the same as --vllm, for any engine", {
        "metavar": "URL", "action": "append"}),
    ("engine_kind", "--engine-kind",
     "read the engines as this kind (vllm, sglang, llamacpp, trtllm, lmdeploy, tgi, dynamo; "
     "detected when unset)", {"metavar": "KIND"}),
    ("gateway_url", "--gateway", "llmtop gateway base URL ('off' to ignore)", {"metavar": "URL"}),
    ("dcgm_url", "--dcgm", "dcgm-exporter /metrics URL for remote GPUs", {"metavar": "URL"}),
    ("admin_token_file", "--admin-token-file",
     "file with the gateway admin token (or LLMTOP_ADMIN_TOKEN)", {"metavar": "F"}),
    ("targets_file", "--targets",
     "file of engine URLs, one a line with an optional name (re-read when it changes)",
     {"metavar": "FILE"}),
    ("prometheus_url", "--prometheus",
     "read every vLLM replica through this Prometheus HTTP API (PromQL)", {"metavar": "URL"}),
    ("prometheus_selector", "--selector",
     "with --prometheus: PromQL matchers of the vLLM series, e.g. '{job=\"vllm\"}'",
     {"metavar": "SEL"}),
    ("prometheus_window_s", "--prometheus-window-s",
     "with --prometheus: range of rates and quantiles, seconds",
     {"metavar": "S", "type": float}),
    ("prometheus_replica_label", "--replica-label",
     "with --prometheus: the label that names a replica (one row per value)",
     {"metavar": "NAME"}),
    ("narrow_scrape", "--full-scrape",
     "scrape a fleet's /metrics in full: narrow_scrape off (on, a target that answers "
     "?name[]= sends only the series llmtop reads)", {"action": "store_const", "const": False}),
    *kube_flags("watch the Kubernetes pods with these labels, each a replica read through the "
                "API server's pod proxy"),
)  # a table: one flag a row, read down its options  # fmt: skip
TOP_FLAGS: tuple[Flag, ...] = (
    ("interval_s", "--interval-s", "seconds between polls",
     {"metavar": "S", "type": float}),
    ("read_only", "--read-only", "disable every key that changes something",
     {"action": "store_const", "const": True}),
    ("record", "--record", "append every poll to a recording", {"metavar": "FILE"}),
    ("past_s", "--past", "start with the past (1h, 30m): the gateway's history or --prometheus",
     {"metavar": "SPAN", "type": parse_span}),
    ("past_s", "--no-past", "start with no past", {"action": "store_const", "const": 0.0}),
)  # a table: one flag a row, read down its options  # fmt: skip


def add_monitor_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by every command that watches targets."""
    flags(p, MonitorSettings, MONITOR_FLAGS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    flags(p, MonitorSettings, (*MONITOR_FLAGS, *TOP_FLAGS))
    slo_flags(p)


def run(args: argparse.Namespace) -> int:
    """Start the TUI; a dead target does not stop it (the screen says DOWN and why)."""
    from llmtop.commands._common import load
    from llmtop.settings import HealthSettings
    from llmtop.tui.launch import run_live

    monitor = load(MonitorSettings, args)
    if monitor.k8s_selector or monitor.inference_pool:  # a 403: one line, before the screen
        import asyncio

        from llmtop.sources.kube.discovery import preflight

        asyncio.run(preflight(monitor))
    return run_live(monitor, load(HealthSettings, args))
