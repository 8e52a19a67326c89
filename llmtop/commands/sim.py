"""`llmtop sim`: a vLLM-compatible simulated engine."""

from __future__ import annotations

import argparse

from llmtop.commands._common import flag, load
from llmtop.settings import SimSettings

HELP = "a simulated vLLM engine (OpenAI API, /metrics, dcgm telemetry) with no GPU"


def add_arguments(p: argparse.ArgumentParser) -> None:
    flag(p, SimSettings, "host", "--host", help="address to listen on")
    flag(p, SimSettings, "port", "--port", type=int, help="port to listen on (0: any free)")
    flag(
        p, SimSettings, "profile", "--profile", help="hardware/model profile (seed, h100-8b, fast)"
    )
    flag(p, SimSettings, "model_name", "--model-name", metavar="NAME", help="served model name")
    flag(
        p,
        SimSettings,
        "max_num_seqs",
        "--max-num-seqs",
        metavar="N",
        type=int,
        help="vLLM --max-num-seqs",
    )
    flag(
        p,
        SimSettings,
        "max_model_len",
        "--max-model-len",
        metavar="N",
        type=int,
        help="vLLM --max-model-len",
    )
    flag(
        p,
        SimSettings,
        "max_num_batched_tokens",
        "--max-num-batched-tokens",
        metavar="N",
        type=int,
        help="vLLM --max-num-batched-tokens",
    )
    flag(
        p,
        SimSettings,
        "kv_tokens",
        "--kv-tokens",
        metavar="N",
        type=int,
        help="KV-cache capacity in tokens",
    )
    flag(
        p,
        SimSettings,
        "max_num_queued_reqs",
        "--max-num-queued-reqs",
        metavar="N",
        type=int,
        help="vLLM 0.32 native admission limit",
    )


def run(args: argparse.Namespace) -> int:
    """Serve the sim until Ctrl-C; a busy port is a ServeError (exit 4)."""
    from llmtop.asgi.uvicorn_runner import serve_forever
    from llmtop.sim.server import banner, create_app

    settings = load(SimSettings, args)
    app = create_app(settings)
    serve_forever(app, settings.host, settings.port, banner=banner(app.state.engine))
    return 0
