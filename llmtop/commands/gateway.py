"""`llmtop gateway`: the admission gateway."""

from __future__ import annotations

import argparse
import sys

from llmtop.commands._common import flag, load
from llmtop.errors import UsageError
from llmtop.settings import AUTOPILOT_TTFT_SLO_S, GatewaySettings

HELP = "admission gateway in front of the engine: bounded concurrency, visible queue, live limits"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from llmtop.core.base.admin_api import LIMITS

    g = GatewaySettings
    flag(
        p,
        g,
        "upstream",
        "--upstream",
        metavar="URL",
        action="append",
        help="engine base URL; repeat it (or comma-separate) for several replicas",
    )
    flag(
        p,
        g,
        "replica_max_concurrency",
        "--replica-max-concurrency",
        metavar="N",
        type=int,
        help="requests allowed at each replica at once",
    )
    flag(p, g, "eject_s", "--eject-s", metavar="S", type=float, help="a failed replica's time out")
    flag(
        p,
        g,
        "redis_url",
        "--redis",
        metavar="URL",
        help="Redis holding the limits shared by several gateways (redis://127.0.0.1:6379/0)",
    )
    flag(p, g, "lease_ttl_s", "--lease-ttl-s", metavar="S", type=float, help="Redis lease TTL")
    flag(p, g, "listen", "--listen", metavar="HOST:PORT", help="address to listen on")
    at_start = {f.name for f in fields(g)}  # the limits GatewaySettings can set at start
    for spec in (s for s in LIMITS if s.field in at_start):  # the one table of limits
        kind = {"int": int, "float": float, "choice": str}[spec.kind]
        more = {"choices": spec.choices} if spec.choices else {}
        flag(p, g, spec.field, spec.option, metavar=spec.metavar, type=kind, help=spec.help, **more)
    flag(
        p,
        g,
        "autopilot",
        "--autopilot",
        action="store_const",
        const=True,
        help="admit by KV footprint, budget moved by the engine's signals, deadline queue;"
        f" TTFT budget {AUTOPILOT_TTFT_SLO_S:g} s unless --ttft-slo is set",
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

    if isinstance(args.upstream, list):  # --upstream repeated: one comma-separated setting
        args.upstream = ",".join(args.upstream)
    run_gateway(load(GatewaySettings, args))
    return 0
