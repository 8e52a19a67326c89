"""`llmtop load`: a bounded load generator for OpenAI-compatible endpoints."""

from __future__ import annotations

import argparse

from llmtop.commands._common import slo_flags

HELP = "bounded streaming load against any OpenAI-compatible endpoint; TTFT, ITL, goodput"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="endpoint base URL (sim, gateway or vLLM)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--concurrency", type=int, metavar="N", help="closed loop: N in flight (default: 8)"
    )
    mode.add_argument("--rate", type=float, metavar="R", help="open loop: R requests/s")
    p.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        metavar="B",
        help="with --rate: gamma shape of the gaps between arrivals"
        " (1 = Poisson, <1 burstier, >1 more even; default 1)",
    )
    p.add_argument(
        "--requests", type=int, default=100, metavar="N", help="stop after N requests (default 100)"
    )
    p.add_argument(
        "--duration-s",
        dest="duration",
        type=float,
        default=60.0,
        metavar="S",
        help="stop after S seconds, cutting requests in flight (default 60)",
    )
    p.add_argument(
        "--prompt-tokens",
        default="512",
        metavar="P|P1:P2",
        help="prompt length in tokens, or a range drawn uniformly (default 512)",
    )
    p.add_argument(
        "--output-tokens", type=int, default=128, metavar="O", help="output length (default 128)"
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="use /v1/chat/completions (prompt length approximate: words, not token ids)",
    )
    p.add_argument("--priority", choices=("high", "normal", "low"), help="x-llmtop-priority")
    slo_flags(p)  # goodput: the requests that ended 200 within both
    p.add_argument(
        "--e2e-slo-s",
        type=float,
        metavar="S",
        help="goodput also needs the whole answer within S seconds (load's own; default off)",
    )
    p.add_argument(
        "--retry-429",
        action="store_true",
        help="on a 429, wait out Retry-After (1 s if absent) and resend, up to 5 times",
    )
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--seed", type=int, default=0, help="seed of prompts and arrivals (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from llmtop.commands._common import load
    from llmtop.load.session import options_from, run_load
    from llmtop.settings import SloSettings

    return run_load(options_from(vars(args), load(SloSettings, args)))
