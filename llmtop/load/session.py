"""`llmtop load`'s work: check the options, run a closed or open loop with a progress line on a
terminal, stop on Ctrl-C with a summary of the requests so far, print the table or JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from llmtop.core.base.slo import SloSettings
from llmtop.errors import UsageError

if TYPE_CHECKING:
    from llmtop.load.runner import Runner, Shape
    from llmtop.load.stats import LoadSummary, RequestResult, Slo


@dataclass(frozen=True)
class LoadOptions:
    """`llmtop load`'s flags, by the same names."""

    url: str
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float = 1.0
    requests: int = 100
    duration: float = 60.0
    """Seconds; requests in flight are cut when it ends."""
    prompt_tokens: str = "512"
    """P or P1:P2 (a uniform range)."""
    output_tokens: int = 128
    chat: bool = False
    priority: str | None = None
    slo_settings: SloSettings = field(default_factory=SloSettings)
    """Goodput's bounds: the SLO ([slo], --ttft-slo-s, --itl-slo-s)..."""
    e2e_slo_s: float | None = None
    """...and, for load alone, the whole answer within this many seconds (None: no bound)."""
    retry_429: bool = False
    model: str | None = None
    seed: int = 0
    json: bool = False

    def goodput_slo(self) -> Slo:
        """The bounds goodput counts by: the SLO's, with --e2e-slo-s."""
        from llmtop.load.stats import Slo

        return Slo(self.slo_settings.ttft_s, self.slo_settings.itl_s, self.e2e_slo_s)


def options_from(flags: Mapping[str, Any], slo_settings: SloSettings) -> LoadOptions:
    """The options from `llmtop load`'s parsed flags (by the same names) and the SLO."""
    given = {f.name: flags[f.name] for f in fields(LoadOptions) if f.name != "slo_settings"}
    return LoadOptions(**given, slo_settings=slo_settings)


def _check(opts: LoadOptions) -> None:
    if opts.concurrency is not None and opts.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if opts.requests < 1:
        raise UsageError("--requests must be at least 1")
    if not opts.duration > 0:
        raise UsageError("--duration-s must be > 0")
    if opts.output_tokens < 1:
        raise UsageError("--output-tokens must be at least 1")
    if opts.rate is not None and (not opts.rate > 0 or not opts.burstiness > 0):
        raise UsageError("--rate and --burstiness must be > 0")
    if opts.e2e_slo_s is not None and not 0 < opts.e2e_slo_s < float("inf"):
        raise UsageError("--e2e-slo-s must be a number of seconds > 0")


def run_load(opts: LoadOptions) -> int:
    """Run the load as the options say, print the summary (a table or JSON); 130 after Ctrl-C."""
    import asyncio
    import json
    import sys

    from llmtop.load.runner import Shape
    from llmtop.load.stats import format_table, parse_prompt_tokens, to_json

    _check(opts)
    slo = opts.goodput_slo()
    shape = Shape(
        prompt_tokens=parse_prompt_tokens(opts.prompt_tokens),
        output_tokens=opts.output_tokens,
        chat=opts.chat,
        priority=opts.priority,
    )
    summary, interrupted = asyncio.run(_main(opts, shape, slo))
    if opts.json:
        out = to_json(summary)
        out["url"] = opts.url
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(format_table(summary) + "\n")
    return 130 if interrupted else 0


async def _main(opts: LoadOptions, shape: Shape, slo: Slo) -> tuple[LoadSummary, bool]:
    """Run the load with a progress line on a TTY; Ctrl-C stops early and still summarises."""
    import asyncio
    import contextlib
    import signal
    import sys

    from llmtop.load.drivers import ClosedLoop, OpenLoop, stop_after
    from llmtop.load.runner import Runner
    from llmtop.load.stats import summarize

    concurrency = opts.concurrency if opts.rate is None else None
    if concurrency is None and opts.rate is None:
        concurrency = 8
    progress = _ProgressLine(opts.requests, opts.duration) if sys.stderr.isatty() else None
    runner = Runner(
        opts.url,
        model=opts.model,
        max_requests=opts.requests,
        max_connections=concurrency or 1000,
        retry_429=opts.retry_429,
        seed=opts.seed,
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
        timer = asyncio.ensure_future(stop_after(runner, opts.duration))
        painter = asyncio.ensure_future(progress.paint(runner)) if progress else None
        try:
            if opts.rate is None:  # closed loop: concurrency is set
                await ClosedLoop(runner, shape, concurrency or 8).wait()
            else:
                await OpenLoop(runner, shape, opts.rate, opts.burstiness, seed=opts.seed).run()
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
