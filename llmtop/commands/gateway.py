"""`llmtop gateway`: the admission gateway."""

from __future__ import annotations

import argparse

from llmtop.commands._common import flag, load
from llmtop.settings import GatewaySettings

HELP = "admission gateway in front of the engine: bounded concurrency, visible queue, live limits"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from llmtop.core.admin_api import LIMITS

    g = GatewaySettings
    flag(p, g, "upstream", "--upstream", metavar="URL", help="engine base URL")
    flag(p, g, "listen", "--listen", metavar="HOST:PORT", help="address to listen on")
    for spec in LIMITS:  # the one table of limits
        kind = int if spec.kind == "int" else float
        flag(p, g, spec.field, spec.option, metavar=spec.metavar, type=kind, help=spec.help)
    flag(
        p,
        g,
        "admin_token_file",
        "--admin-token-file",
        metavar="F",
        help="file with the admin token (or LLMTOP_ADMIN_TOKEN)",
    )


def run(args: argparse.Namespace) -> int:
    from llmtop.gateway.serve import run_gateway

    run_gateway(load(GatewaySettings, args))
    return 0
