"""`llmtop serve MODEL [vLLM args...]`: a right-sized vLLM behind the gateway, with the TUI."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from llmtop.commands._common import Row, load, rows, slo_rows
from llmtop.settings import HealthSettings, MonitorSettings

if TYPE_CHECKING:
    from llmtop.serve.plan import Plan
    from llmtop.serve.run import Commands

HELP = "a right-sized vLLM behind the gateway, with the TUI (--dry-run: the arithmetic only)"

OWN_FLAGS: tuple[Row, ...] = (
    ("--listen", "the gateway's (public) address (default 127.0.0.1:9000)",
     {"metavar": "HOST:PORT"}),
    ("--expect-prompt-tokens", "prompt tokens of a typical request (default 1000)",
     {"metavar": "N", "type": int}),
    ("--expect-output-tokens", "output tokens of a typical request (default 250)",
     {"metavar": "N", "type": int}),
    ("--gpu-memory-gb",
     "memory of one GPU, GiB (default: NVML's first GPU; on CPU, VLLM_CPU_KVCACHE_SPACE)",
     {"metavar": "G", "type": float}),
    ("--reserve-gb", "GiB per GPU assumed for activations and CUDA graphs (default 2)",
     {"metavar": "G", "type": float}),
    ("--dry-run", "print the arithmetic and the commands, start nothing", {"action": "store_true"}),
    ("--no-tui", "run without the TUI until Ctrl-C", {"action": "store_true"}),
    ("--vllm-bin", "the vllm executable (default: vllm on PATH)", {"metavar": "PATH"}),
    ("--ready-timeout-s", "seconds to wait for vLLM's /health (default 600)",
     {"metavar": "S", "type": float, "dest": "ready_timeout"}),
    ("--log-dir", "where the engine's and gateway's logs go (default ~/.cache/llmtop/serve)",
     {"metavar": "DIR"}),
    ("--admin-token-file", "the gateway's admin token file (needed to listen beyond loopback)",
     {"metavar": "F"}),
    ("--engine-kind", "vllm only: serve starts vLLM (another engine: start it yourself and run "
     "`llmtop gateway --engine URL --autopilot` in front)", {"metavar": "KIND"}),
    # a test hook: a command standing in for `vllm serve` (the sim, in the integration test)
    ("--engine-cmd", argparse.SUPPRESS, {}),
    *slo_rows(),  # the SLO, for the gateway and the TUI alike
)  # a table: one flag a row, read down its options  # fmt: skip


def own_flags(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """llmtop's own flags, before MODEL or anywhere among vLLM's arguments; without `p`, a
    parser of them among vLLM's arguments, by their whole names (a prefix is vLLM's)."""
    p = p or argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    return rows(p, OWN_FLAGS, default=argparse.SUPPRESS)  # not given: the plan's default


def add_arguments(p: argparse.ArgumentParser) -> None:
    own_flags(p)
    p.add_argument("model", metavar="MODEL", help="local model directory (with config.json)")
    vllm = "passed to `vllm serve` as given (yours win over the plan's)"
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, metavar="vLLM args", help=vllm)


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from llmtop.serve.run import only_vllm, options_from, serve, split_args

    late, vllm_args = own_flags().parse_known_args(split_args(args.vllm_args))
    vars(args).update(vars(late))  # after MODEL as before it, for the TUI (the SLO) too
    note = only_vllm(vars(args), os.environ)  # another engine asked for: one line, exit 2
    if note is not None:
        print(f"llmtop: {note}", file=sys.stderr)
    args.engine_kind = "vllm"  # the TUI reads the vLLM it starts as vLLM
    return serve(options_from(args.model, vllm_args, vars(args)), say=print, tui=_tui(args))


def _tui(args: argparse.Namespace) -> Callable[[Commands, Plan], int]:
    """Open the TUI on the started engine and gateway (injected: serve imports no TUI)."""

    def attach(cmds: Commands, plan: Plan) -> int:
        from llmtop.tui.launch import run_live

        args.vllm_urls, args.gateway_url = [cmds.engine_url], cmds.gateway_url
        monitor, health = load(MonitorSettings, args), load(HealthSettings, args)
        return run_live(
            monitor, health, max_num_seqs=plan.max_num_seqs, title=f"llmtop serve {args.model}"
        )

    return attach
