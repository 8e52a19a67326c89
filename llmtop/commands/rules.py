"""`llmtop rules`: llmtop's findings as a Prometheus rules file (docs/alerts.md).

The file is made whole before anything is written: printed, or written to --out through a
temporary file renamed into place, so a bad flag leaves no half file behind.
"""

from __future__ import annotations

import argparse

from llmtop.commands._common import Flag, flags, load, slo_flags
from llmtop.settings import HealthSettings, MonitorSettings

HELP = "print llmtop's findings as Prometheus alerting and recording rules (docs/alerts.md)"

MONITOR: tuple[Flag, ...] = (
    ("prometheus_selector", "--vllm-selector",
     "PromQL matchers of vLLM's series, e.g. '{job=\"vllm\"}'", {"metavar": "SEL"}),
    ("prometheus_gateway_selector", "--gateway-selector",
     "PromQL matchers of the llmtop gateway's series", {"metavar": "SEL"}),
    ("prometheus_replica_label", "--replica-label",
     "the label that names a replica (one alert per value)", {"metavar": "NAME"}),
)  # a table: one flag a row, read down its options  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    flags(p, MonitorSettings, MONITOR)
    slo_flags(p)
    p.add_argument(
        "--interval-s",
        dest="interval",
        type=float,
        default=15.0,
        metavar="S",
        help="Prometheus' scrape and evaluation interval the windows are sized for (default 15)",
    )
    p.add_argument(
        "--dialect",
        default="vllm",
        metavar="ENGINES",
        help="the engines whose series the rules read, comma-separated, or all: one group each, "
        "in its own metric names (vllm, sglang, llamacpp, trtllm, lmdeploy, tgi, dynamo; "
        "default vllm)",
    )
    p.add_argument("--out", metavar="FILE", help="write the file here (default: print it)")


def run(args: argparse.Namespace) -> int:
    import os
    import sys
    import tempfile
    from pathlib import Path

    from llmtop.core.alerts.spec import AlertSpec, matchers
    from llmtop.core.output.rulesfile import dialects, render
    from llmtop.errors import ConfigError

    monitor, health = load(MonitorSettings, args), load(HealthSettings, args)
    spec = AlertSpec(
        health=health,
        vllm_matchers=matchers(monitor.prometheus_selector, "--vllm-selector"),
        gateway_matchers=matchers(monitor.prometheus_gateway_selector, "--gateway-selector"),
        replica_label=monitor.prometheus_replica_label,
        interval_s=float(args.interval),
    )
    text = render(spec, dialects=dialects(args.dialect))
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise ConfigError(f"--out {args.out}: {e.strerror or e}") from None
    return 0
