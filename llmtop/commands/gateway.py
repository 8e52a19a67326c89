"""`llmtop gateway`: the admission gateway."""

from __future__ import annotations

import argparse

from llmtop.commands._common import flag, load
from llmtop.settings import GatewaySettings

HELP = "admission gateway in front of the engine: bounded concurrency, visible queue, live limits"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = GatewaySettings
    flag(p, g, "upstream", "--upstream", metavar="URL", help="engine base URL")
    flag(p, g, "listen", "--listen", metavar="HOST:PORT", help="address to listen on")
    flag(
        p,
        g,
        "max_concurrency",
        "--max-concurrency",
        metavar="N",
        type=int,
        help="requests at the engine at once",
    )
    flag(p, g, "max_queue", "--max-queue", metavar="N", type=int, help="requests allowed to wait")
    flag(
        p,
        g,
        "queue_timeout_s",
        "--queue-timeout",
        metavar="S",
        type=float,
        help="seconds a request may wait",
    )
    flag(
        p,
        g,
        "rate_limit_rpm",
        "--rate-limit-rpm",
        metavar="RPM",
        type=float,
        help="requests per minute per tenant",
    )
    flag(
        p,
        g,
        "max_inflight_prompt_tokens",
        "--max-inflight-prompt-tokens",
        metavar="N",
        type=int,
        help="cap on summed prompt tokens in flight",
    )
    flag(
        p,
        g,
        "autopilot",
        "--autopilot",
        action="store_const",
        const=True,
        help="admit by KV footprint, budget moved by the engine's signals, deadline queue",
    )
    flag(p, g, "ttft_slo_s", "--ttft-slo", metavar="S", type=float, help="TTFT budget (s)")
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
