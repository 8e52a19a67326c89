"""`llmtop load`: a bounded load generator for OpenAI-compatible endpoints."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llmtop.errors import UsageError

if TYPE_CHECKING:
    from llmtop.load.runner import Runner, Shape
    from llmtop.load.stats import LoadSummary, RequestResult, Slo

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
        "--duration",
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
    p.add_argument(
        "--slo",
        default="ttft=2,itl=0.1",
        help="goodput SLO in seconds: ttft=S,itl=S[,e2e=S] or none (default ttft=2,itl=0.1)",
    )
    p.add_argument(
        "--retry-429",
        action="store_true",
        help="on a 429, wait out Retry-After (1 s if absent) and resend, up to 5 times",
    )
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--seed", type=int, default=0, help="seed of prompts and arrivals (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _check(args: argparse.Namespace) -> None:
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if args.requests < 1:
        raise UsageError("--requests must be at least 1")
    if not args.duration > 0:
        raise UsageError("--duration must be > 0")
    if args.output_tokens < 1:
        raise UsageError("--output-tokens must be at least 1")
    if args.rate is not None and (not args.rate > 0 or not args.burstiness > 0):
        raise UsageError("--rate and --burstiness must be > 0")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import sys

    from llmtop.load.runner import Shape
    from llmtop.load.stats import format_table, parse_prompt_tokens, parse_slo, to_json

    _check(args)
    slo = parse_slo(args.slo)
    shape = Shape(
        prompt_tokens=parse_prompt_tokens(args.prompt_tokens),
        output_tokens=args.output_tokens,
        chat=args.chat,
        priority=args.priority,
    )
    summary, interrupted = asyncio.run(_main(args, shape, slo))
    if args.json:
        out = to_json(summary)
        out["url"] = args.url
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(format_table(summary) + "\n")
    return 130 if interrupted else 0


async def _main(args: argparse.Namespace, shape: Shape, slo: Slo) -> tuple[LoadSummary, bool]:
    """Run the load with a progress line on a TTY; Ctrl-C stops early and still summarises."""
    import asyncio
    import contextlib
    import signal
    import sys

    from llmtop.load.runner import ClosedLoop, OpenLoop, Runner, stop_after
    from llmtop.load.stats import summarize

    concurrency = args.concurrency if args.rate is None else None
    if concurrency is None and args.rate is None:
        concurrency = 8
    progress = _ProgressLine(args.requests, args.duration) if sys.stderr.isatty() else None
    runner = Runner(
        args.url,
        model=args.model,
        max_requests=args.requests,
        max_connections=concurrency or 1000,
        retry_429=args.retry_429,
        seed=args.seed,
        on_result=progress.add if progress else None,
    )
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        runner.stop()
        loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C exits at once

    async with runner:
        await runner.resolve_model()
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on Windows
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        runner.mark_start()
        timer = asyncio.ensure_future(stop_after(runner, args.duration))
        painter = asyncio.ensure_future(progress.paint(runner)) if progress else None
        try:
            if concurrency is not None:
                driver = ClosedLoop(runner, shape, concurrency)
                await driver.wait()
            else:
                await OpenLoop(runner, shape, args.rate, args.burstiness, seed=args.seed).run()
        finally:
            wall = runner.elapsed()
            timer.cancel()
            if painter is not None and progress is not None:
                painter.cancel()
                progress.clear()
            loop.remove_signal_handler(signal.SIGINT)
    summary = summarize(runner.results, wall, slo)
    if interrupted:
        sys.stderr.write("llmtop: interrupted; summary of the requests so far\n")
    return summary, interrupted


class _ProgressLine:
    """A one-line progress bar on stderr, redrawn with \\r (only when stderr is a terminal)."""

    def __init__(self, total: int, duration_s: float) -> None:
        self.total = total
        self.duration_s = duration_s
        self.done = self.ok = self.rejected = self.failed = 0

    def add(self, r: RequestResult) -> None:
        self.done += 1
        if r.outcome == "ok":
            self.ok += 1
        elif r.outcome == "rejected":
            self.rejected += 1
        elif r.outcome != "cut":
            self.failed += 1

    async def paint(self, runner: Runner) -> None:
        import asyncio
        import sys

        while True:
            t = runner.elapsed()
            frac = max(self.done / self.total, min(t / self.duration_s, 1.0))
            bar = "#" * int(frac * 20)
            sys.stderr.write(
                f"\r[{bar:<20}] {self.done}/{self.total} req {t:5.1f}/{self.duration_s:g} s"
                f"  ok {self.ok}  429 {self.rejected}  err {self.failed}"
                f"  in flight {runner.in_flight} "
            )
            sys.stderr.flush()
            await asyncio.sleep(0.2)

    def clear(self) -> None:
        import sys

        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
