"""`llmtop sim`: a vLLM-compatible simulated engine."""

from __future__ import annotations

import argparse

from llmtop.commands._common import Flag, flags, load
from llmtop.core.dialects.catalog import KINDS
from llmtop.settings import SimSettings

HELP = "a simulated vLLM engine (OpenAI API, /metrics, dcgm telemetry) with no GPU"


N = {"metavar": "N", "type": int}

FLAGS: tuple[Flag, ...] = (
    ("host", "--host", "address to listen on", {}),
    ("port", "--port", "port to listen on (0: any free)", {"type": int}),
    ("profile", "--profile", "hardware/model profile (seed, h100-8b, fast) or a .json file", {}),
    ("model_name", "--model-name", "served model name", {"metavar": "NAME"}),
    ("max_num_seqs", "--max-num-seqs", "vLLM --max-num-seqs", N),
    ("max_model_len", "--max-model-len", "vLLM --max-model-len", N),
    ("max_num_batched_tokens", "--max-num-batched-tokens", "vLLM --max-num-batched-tokens", N),
    ("kv_tokens", "--kv-tokens", "KV-cache capacity in tokens", N),
    ("max_num_queued_reqs", "--max-num-queued-reqs", "vLLM 0.32 native admission limit", N),
    (
        "fault",
        "--fault",
        "faults to have, NAME[@SECONDS after start][+FOR SECONDS], comma-separated:"
        " scheduler-stuck, slow (5x), garbage (docs/sim.md)",
        {"metavar": "F"},
    ),
    (
        "dialect",
        "--dialect",
        f"the engine whose /metrics names and info endpoint to speak: {', '.join(KINDS)}",
        {"metavar": "ENGINE"},
    ),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    flags(p, SimSettings, FLAGS)


def run(args: argparse.Namespace) -> int:
    """Serve the sim until Ctrl-C; a busy port is a ServeError (exit 4)."""
    from llmtop.sim.server import run_sim

    run_sim(load(SimSettings, args))
    return 0
