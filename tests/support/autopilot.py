"""The autopilot's inputs by hand: one interval's engine signals (`sig`, unknown only what a test
says) and an ITL histogram a preemption storm is felt at (`FELT`)."""

from __future__ import annotations

from llmtop.core.derive.signals import EngineSignals
from llmtop.core.vllm.scrape import Histogram

FELT = Histogram(((0.05, 0.0), (0.1, 10.0), (float("inf"), 10.0)), 0.7, 10.0)
"""An interval's ITL at 70 ms a token: within the 100 ms SLO, past the 50 ms at which a
preemption storm is felt (AutopilotConfig.thrash_felt)."""


def sig(**kw: object) -> EngineSignals:
    """An interval of one second; unknown only what a test says."""
    base: dict[str, object] = {
        "interval_s": 1.0,
        "kv_capacity_blocks": 1000,
        "kv_block_size": 16,
        "kv_usage_frac": 0.5,
        "kv_usage_frac_waiting": None,
        "running": 0.0,
        "waiting": 0.0,
        "preemptions": 0.0,
        "prompt_tokens": 0.0,
        "prompt_computed_tokens": None,
        "generation_tokens": 0.0,
        "ttft_s_hist": None,
        "itl_s_hist": None,
        "prefill_s_hist": None,
        "output_tokens_hist": None,
    }
    base.update(kw)
    return EngineSignals(**base)  # type: ignore[arg-type]
