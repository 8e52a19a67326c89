"""`llmtop load`: a bounded load generator for OpenAI-compatible endpoints."""

from __future__ import annotations

import argparse

from llmtop.errors import NotBuiltError

HELP = "bounded streaming load against any OpenAI-compatible endpoint; TTFT, ITL, goodput"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="endpoint base URL")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=int, metavar="N", help="closed loop: N in flight")
    mode.add_argument("--rate", type=float, metavar="R", help="open loop: R requests/s")
    p.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        metavar="B",
        help="gamma shape of arrivals (1 = Poisson)",
    )
    p.add_argument("--requests", type=int, metavar="N", help="stop after N requests")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--prompt-tokens", default="512", metavar="P|P1:P2", help="prompt length")
    p.add_argument("--output-tokens", type=int, default=128, metavar="O", help="output length")
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    p.add_argument("--priority", choices=("high", "normal", "low"), help="x-llmtop-priority")
    p.add_argument("--slo", default="ttft=2,itl=0.1", help="goodput SLO (default ttft=2,itl=0.1)")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    raise NotBuiltError("llmtop load is not built yet")
