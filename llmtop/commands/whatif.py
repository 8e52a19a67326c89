"""`llmtop whatif`: predict what new gateway limits would do, calibrated from the live engine."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vllm", metavar="URL", required=True, help="engine base URL")
    p.add_argument("--gateway", metavar="URL", help="llmtop gateway base URL (optional)")
    p.add_argument("--window-s", dest="window", type=float, default=30.0, metavar="S",
                   help="seconds of live metrics to calibrate on (default: 30)")  # fmt: skip
    p.add_argument("--interval-s", dest="interval", type=float, default=1.0, metavar="S",
                   help="seconds between scrapes (default: 1)")  # fmt: skip
    p.add_argument("--cap", type=_caps, default=(), metavar="N,N,..",
                   help="candidate max_concurrency values, e.g. 4,8,16")  # fmt: skip
    p.add_argument("--max-queue", type=int, metavar="N", help="candidate max_queue")
    p.add_argument("--queue-timeout-s", dest="queue_timeout", type=float, metavar="S",
                   help="candidate queue timeout, seconds")  # fmt: skip
    p.add_argument("--horizon-s", dest="horizon", type=float, default=60.0, metavar="S",
                   help="seconds each prediction covers from the change (default: 60)")  # fmt: skip
    p.add_argument("--steady", action="store_true",
                   help="predict the steady state (empty, 30 s warm-up), not from now")  # fmt: skip
    p.add_argument("--max-num-seqs", type=int, default=256, metavar="N",
                   help="the engine's --max-num-seqs (not in /metrics; default: 256)")  # fmt: skip
    p.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                   help="the engine's --max-num-batched-tokens (default: inferred)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated traffic")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    slo_flags(p)  # goodput: TTFT and mean ITL within them
    p.add_argument("--admin-token-file", metavar="F", help="file with the gateway admin token")


def run(args: argparse.Namespace) -> int:
    from llmtop.commands._common import load
    from llmtop.whatif.service import options_from, run_whatif, validate

    opts = options_from(vars(args), load(HealthSettings, args).slo)
    validate(opts, window_s=args.window, interval_s=args.interval)
    result = run_whatif(
        args.vllm, args.gateway, opts, window_s=args.window, interval_s=args.interval,
        token_file=args.admin_token_file,
    )  # fmt: skip
    print(result.json() if args.json else result.text())
    return 0
