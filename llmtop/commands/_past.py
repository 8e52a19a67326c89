"""What `report` and `replay` read when not a file: a gateway's history (`--gateway URL`) or
Prometheus' range (`--prometheus URL`), over `--since` (docs/recording.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llmtop.commands._common import load
from llmtop.core.pipeline.span import parse_span
from llmtop.errors import UsageError
from llmtop.settings import MonitorSettings

if TYPE_CHECKING:
    from llmtop.core.record.decode import Recording

DEFAULT_SINCE_S = 3600.0


def add_past_arguments(p: argparse.ArgumentParser) -> None:
    """The file becomes optional; --gateway, --prometheus, --since, --admin-token-file."""
    p.add_argument("--gateway", metavar="URL", help="read this llmtop gateway's history")
    p.add_argument("--prometheus", metavar="URL", help="read this Prometheus' range (query_range)")
    p.add_argument(
        "--since",
        metavar="SPAN",
        type=parse_span,
        help="with --gateway or --prometheus: how far back (30m, 1h, 3600; default 1h)",
    )
    p.add_argument(
        "--admin-token-file",
        metavar="F",
        help="with --gateway: file with the admin token (or LLMTOP_ADMIN_TOKEN)",
    )


def fetch_past(args: argparse.Namespace) -> tuple[str, Recording] | None:
    """(a name, the recording) of --gateway or --prometheus; None for a file. One UsageError
    line unless exactly one of a file, --gateway and --prometheus is given."""
    given = [x for x in (args.file, args.gateway, args.prometheus) if x]
    if len(given) != 1:
        raise UsageError("give one of: a recording file, --gateway URL, --prometheus URL")
    if args.file:
        if args.since is not None:
            raise UsageError("--since goes with --gateway or --prometheus, not a file")
        return None
    import asyncio

    since_s = DEFAULT_SINCE_S if args.since is None else args.since
    if since_s <= 0:
        raise UsageError("--since must be more than 0 seconds")
    monitor = load(MonitorSettings, args)
    if args.gateway:
        from llmtop.sources.history import gateway_history

        url = str(args.gateway).rstrip("/")
        rec = asyncio.run(gateway_history(url, monitor.admin_token, since_s))
        return f"{url} history", rec
    from llmtop.sources.prometheus_history import prometheus_history

    url = str(args.prometheus).rstrip("/")
    rec = asyncio.run(
        prometheus_history(
            url,
            since_s,
            selector=monitor.prometheus_selector,
            window_s=monitor.prometheus_window_s,
            replica_label=monitor.prometheus_replica_label,
        )
    )
    return f"{url} range", rec
