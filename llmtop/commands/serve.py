"""`llmtop serve MODEL [vLLM args...]`: a right-sized vLLM behind the gateway, with the TUI."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmtop.serve.plan import Plan
    from llmtop.serve.run import Commands

HELP = (
    "start vLLM right-sized for the model, the memory and the expected request, behind the "
    "gateway, with the TUI (needs the vllm extra; --dry-run prints the arithmetic)"
)


def _own_flags(p: argparse.ArgumentParser) -> None:
    """llmtop's own flags; they may come before MODEL or anywhere among the vLLM arguments."""
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=argparse.SUPPRESS,
        help="the gateway's (public) address (default 127.0.0.1:9000)",
    )
    p.add_argument(
        "--expect-prompt-tokens",
        metavar="N",
        type=int,
        default=argparse.SUPPRESS,
        help="prompt tokens of a typical request (default 1000)",
    )
    p.add_argument(
        "--expect-output-tokens",
        metavar="N",
        type=int,
        default=argparse.SUPPRESS,
        help="output tokens of a typical request (default 250)",
    )
    p.add_argument(
        "--gpu-memory-gb",
        metavar="G",
        type=float,
        default=argparse.SUPPRESS,
        help="memory of one GPU, GiB (default: NVML's first GPU; on CPU, VLLM_CPU_KVCACHE_SPACE)",
    )
    p.add_argument(
        "--reserve-gb",
        metavar="G",
        type=float,
        default=argparse.SUPPRESS,
        help="GiB per GPU assumed for activations and CUDA graphs (default 2)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the arithmetic and the commands, start nothing",
    )
    p.add_argument(
        "--no-tui",
        dest="no_tui",
        action="store_true",
        default=argparse.SUPPRESS,
        help="run without the TUI until Ctrl-C",
    )
    p.add_argument(
        "--vllm-bin",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the vllm executable (default: vllm on PATH)",
    )
    p.add_argument(
        "--ready-timeout",
        metavar="S",
        type=float,
        default=argparse.SUPPRESS,
        help="seconds to wait for vLLM's /health (default 600)",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="where the engine's and gateway's logs go (default ~/.cache/llmtop/serve)",
    )
    p.add_argument(
        "--admin-token-file",
        metavar="F",
        default=argparse.SUPPRESS,
        help="the gateway's admin token file (needed to listen beyond loopback)",
    )
    # a test hook: a command standing in for `vllm serve` (the sim, in the integration test)
    p.add_argument("--engine-cmd", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    _own_flags(p)
    p.add_argument("model", metavar="MODEL", help="local model directory (with config.json)")
    p.add_argument(
        "vllm_args",
        nargs=argparse.REMAINDER,
        metavar="vLLM args",
        help="passed to `vllm serve` as given (yours win over the plan's)",
    )


def run(args: argparse.Namespace) -> int:
    from llmtop.errors import UsageError
    from llmtop.serve.run import ServeOptions, serve, split_args

    own = argparse.ArgumentParser(add_help=False)
    _own_flags(own)
    late, vllm_args = own.parse_known_args(split_args(args.vllm_args))
    given = {**vars(args), **vars(late)}
    for flag in ("expect_prompt_tokens", "expect_output_tokens"):
        if flag in given and given[flag] < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1")
    opts = ServeOptions(
        model=args.model,
        vllm_args=tuple(vllm_args),
        **{
            k: given[k]
            for k in (
                "listen",
                "expect_prompt_tokens",
                "expect_output_tokens",
                "gpu_memory_gb",
                "reserve_gb",
                "dry_run",
                "vllm_bin",
                "engine_cmd",
                "log_dir",
                "admin_token_file",
            )
            if k in given
        },
        **({"ready_timeout_s": given["ready_timeout"]} if "ready_timeout" in given else {}),
        tui=not given.get("no_tui", False),
    )
    return serve(opts, say=print, tui=_tui(args))


def _tui(args: argparse.Namespace) -> Callable[[Commands, Plan], int]:
    """Open the TUI on the started engine and gateway."""

    def attach(cmds: Commands, plan: Plan) -> int:
        from llmtop.commands._common import load
        from llmtop.settings import HealthSettings, MonitorSettings
        from llmtop.tui.launch import run_live

        args.vllm_urls = [cmds.engine_url]
        args.gateway_url = cmds.gateway_url
        return run_live(
            load(MonitorSettings, args),
            load(HealthSettings, args),
            max_num_seqs=plan.max_num_seqs,
            title=f"llmtop serve {args.model}",
        )

    return attach
