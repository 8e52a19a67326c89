"""`llmtop gateway`: the admission gateway."""

from __future__ import annotations

import argparse
import sys

from llmtop.commands._common import Flag, flags, kube_flags, limit_flags, load, slo_flags
from llmtop.core.pipeline.span import parse_span
from llmtop.settings import GatewaySettings

HELP = "admission gateway in front of the engine: bounded concurrency, visible queue, live limits"

ON = {"action": "store_const", "const": True}
UPSTREAM_FLAGS: tuple[Flag, ...] = (
    ("upstream", "--vllm",
     "engine (vLLM) base URL; repeat it (or comma-separate) for several replicas",
     {"metavar": "URL", "action": "append"}),
    ("upstream", "--engine", "the same as --vllm, for any engine",
     {"metavar": "URL", "action": "append"}),
    ("engine_kind", "--engine-kind",
     "read the engine's /metrics as this kind (vllm, sglang, llamacpp, trtllm, lmdeploy, tgi, "
     "dynamo; detected when unset)", {"metavar": "KIND"}),
    ("replica_max_concurrency", "--replica-max-concurrency",
     "requests allowed at each replica at once", {"metavar": "N", "type": int}),
    ("eject_s", "--eject-s", "a failed replica's time out", {"metavar": "S", "type": float}),
    ("redis_url", "--redis",
     "Redis holding the limits shared by several gateways (redis://127.0.0.1:6379/0)",
     {"metavar": "URL"}),
    ("lease_ttl_s", "--lease-ttl-s", "Redis lease TTL", {"metavar": "S", "type": float}),
    ("replica_deadline_s", "--replica-deadline-s",
     "a replica whose /health is unanswered this long is out of rotation (a hang)",
     {"metavar": "S", "type": float}),
    ("drain_grace_s", "--drain-grace-s",
     "after SIGTERM: /readyz fails, new requests still served this long",
     {"metavar": "S", "type": float}),
    ("drain_timeout_s", "--drain-timeout-s",
     "then no new connections; requests in flight get this long before an error ends them",
     {"metavar": "S", "type": float}),
    ("listen", "--listen", "address to listen on", {"metavar": "HOST:PORT"}),
    *kube_flags("follow the Ready Kubernetes pods with these labels as the upstreams"
                " (docs/kubernetes.md)"),
)  # a table: one flag a row, read down its options  # fmt: skip
MODE_FLAGS: tuple[Flag, ...] = (
    ("autopilot", "--autopilot",
     "admit by KV footprint, budget moved by the engine's signals, a deadline queue working"
     " to the SLO (--ttft-slo-s, --itl-slo-s)", ON),
    ("admin_token_file", "--admin-token-file",
     "file with the admin token (or LLMTOP_ADMIN_TOKEN)", {"metavar": "F"}),
    ("trust_client_headers", "--trust-client-headers",
     "take x-llmtop-priority and x-llmtop-tenant as sent (behind an authenticating proxy)", ON),
    ("engine_priority", "--engine-priority",
     "stamp vLLM's priority field from the gateway's (vLLM with --scheduling-policy priority)",
     ON),
)  # a table: one flag a row, read down its options  # fmt: skip
HISTORY_FLAGS: tuple[Flag, ...] = (
    ("history", "--no-history", "keep no history", {"action": "store_const", "const": False}),
    ("history_dir", "--history-dir", "folder of the history file", {"metavar": "DIR"}),
    ("history_max_age_s", "--history-max-age", "history kept (3600, 90m, 24h)",
     {"metavar": "AGE", "type": parse_span}),
    ("history_max_mb", "--history-max-mb", "megabytes the history may hold",
     {"metavar": "MB", "type": float}),
)  # docs/recording.md, "History in the gateway"  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    table = (*UPSTREAM_FLAGS, *limit_flags(GatewaySettings), *MODE_FLAGS, *HISTORY_FLAGS)
    flags(p, GatewaySettings, table)
    slo_flags(p)
    p.add_argument(
        "--hash-key",
        action="store_true",
        help="print the SHA-256 of the API key read from stdin, for [gateway] api_keys, and exit",
    )


def run(args: argparse.Namespace) -> int:
    from llmtop.gateway.server.serve import hash_key_from, run_gateway

    if args.hash_key:
        print(hash_key_from(sys.stdin.read()))
        return 0
    if isinstance(args.upstream, list):  # --vllm repeated: one comma-separated setting
        args.upstream = ",".join(args.upstream)
    settings = load(GatewaySettings, args)
    from llmtop.sources.kube.upstreams import follow_pods  # the pods, listed once here

    run_gateway(*follow_pods(settings))
    return 0
