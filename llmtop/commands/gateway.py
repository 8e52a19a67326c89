"""`llmtop gateway`: the admission gateway."""

from __future__ import annotations

import argparse
import sys

from llmtop.commands._common import flag, load
from llmtop.errors import UsageError
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
        "admin_token_file",
        "--admin-token-file",
        metavar="F",
        help="file with the admin token (or LLMTOP_ADMIN_TOKEN)",
    )
    flag(
        p,
        g,
        "trust_client_headers",
        "--trust-client-headers",
        action="store_const",
        const=True,
        help="take x-llmtop-priority and x-llmtop-tenant as sent (behind an authenticating proxy)",
    )
    flag(
        p,
        g,
        "engine_priority",
        "--engine-priority",
        action="store_const",
        const=True,
        help="stamp vLLM's priority field from the gateway's (vLLM with --scheduling-policy "
        "priority)",
    )
    p.add_argument(
        "--hash-key",
        action="store_true",
        help="print the SHA-256 of the API key read from stdin, for [gateway] api_keys, and exit",
    )


def hash_key_from(text: str) -> str:
    """The key table's hash of a key typed or piped in (its line ending is not part of it)."""
    key = text.strip()
    if not key:
        raise UsageError(
            '--hash-key: no key on stdin (printf %s "$KEY" | llmtop gateway --hash-key)'
        )
    from llmtop.gateway.trust import hash_key

    return hash_key(key)


def run(args: argparse.Namespace) -> int:
    if args.hash_key:
        print(hash_key_from(sys.stdin.read()))
        return 0
    from llmtop.gateway.serve import run_gateway

    run_gateway(load(GatewaySettings, args))
    return 0
