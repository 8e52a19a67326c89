"""`llmtop whatif`: predict what new gateway limits would do, calibrated from the live engine."""

from __future__ import annotations

import argparse

from llmtop.commands._common import Row, kube_flags, rows, slo_flags
from llmtop.settings import HealthSettings

HELP = "predict TTFT, goodput and throughput for candidate caps, from the live /metrics"


def _caps(text: str) -> tuple[int, ...]:
    try:
        caps = tuple(int(c) for c in text.split(",") if c.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected caps like 4,8,16, got {text!r}") from None
    if not caps or min(caps) < 1 or len(caps) > 8:
        raise argparse.ArgumentTypeError("give 1 to 8 caps, each at least 1")
    return caps


FLAGS: tuple[Row, ...] = (
    ("--vllm", "engine base URL (or one Kubernetes pod: --k8s-selector)", {"metavar": "URL"}),
    ("--gateway", "llmtop gateway base URL (optional)", {"metavar": "URL"}),
    ("--window-s", "seconds of live metrics to calibrate on (default: 30)",
     {"dest": "window", "type": float, "default": 30.0, "metavar": "S"}),
    ("--interval-s", "seconds between scrapes (default: 1)",
     {"dest": "interval", "type": float, "default": 1.0, "metavar": "S"}),
    ("--cap", "candidate max_concurrency values, e.g. 4,8,16",
     {"type": _caps, "default": (), "metavar": "N,N,.."}),
    ("--max-queue", "candidate max_queue", {"type": int, "metavar": "N"}),
    ("--queue-timeout-s", "candidate queue timeout, seconds",
     {"dest": "queue_timeout", "type": float, "metavar": "S"}),
    ("--horizon-s", "seconds each prediction covers from the change (default: 60)",
     {"dest": "horizon", "type": float, "default": 60.0, "metavar": "S"}),
    ("--steady", "predict the steady state (empty, 30 s warm-up), not from now",
     {"action": "store_true"}),
    ("--max-num-seqs", "the engine's --max-num-seqs (not in /metrics; default: 256)",
     {"type": int, "default": 256, "metavar": "N"}),
    ("--max-num-batched-tokens", "the engine's --max-num-batched-tokens (default: inferred)",
     {"type": int, "metavar": "N"}),
    ("--seed", "seed of the simulated traffic", {"type": int, "default": 0}),
    ("--json", "print one JSON object", {"action": "store_true"}),
)  # a table: one flag a row, read down its options  # fmt: skip
K8S_FLAGS = kube_flags(
    "the one Ready Kubernetes pod with these labels, read through the API server's pod proxy"
)
K8S = tuple(field for field, *_ in K8S_FLAGS)
"""The console's discovery flags; here they must name one pod."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    rows(p, (*FLAGS, *((o, h, {**kw, "dest": f}) for f, o, h, kw in K8S_FLAGS)))
    slo_flags(p)  # goodput: TTFT and mean ITL within them
    p.add_argument("--admin-token-file", metavar="F", help="file with the gateway admin token")


def run(args: argparse.Namespace) -> int:
    from llmtop.commands._common import load
    from llmtop.whatif.service import options_from, run_whatif, validate

    opts = options_from(vars(args), load(HealthSettings, args).slo)
    validate(opts, window_s=args.window, interval_s=args.interval)
    from llmtop.sources.kube.single import engine_target  # --vllm, or the one pod named

    url, transport = engine_target(args.vllm, **{k: getattr(args, k) for k in K8S})
    result = run_whatif(
        url,
        args.gateway,
        opts,
        window_s=args.window,
        interval_s=args.interval,
        token_file=args.admin_token_file,
        transport=transport,
    )
    print(result.json() if args.json else result.text())
    return 0
