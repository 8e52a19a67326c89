"""What the sim says besides /metrics when it speaks another engine's dialect (`llmtop sim
--dialect`): where that engine serves its metrics and what its own info endpoint answers
(`Dialect.info_path`), minimally, with a version marked as the sim's. Pure."""

from __future__ import annotations

from typing import Any

from llmtop.core.dialects.dialect import Dialect
from llmtop.core.dialects.engines import VLLM
from llmtop.sim.config import EngineConfig
from llmtop.sim.metrics import VLLM_VERSION

METRICS_PATHS: dict[str, tuple[str, ...]] = {"trtllm": ("/metrics", "/prometheus/metrics")}
"""Kind -> the paths its /metrics is served at, where not /metrics alone (trtllm-serve's is
/prometheus/metrics)."""


def sim_version() -> str:
    """The version another engine's info endpoint says: the sim's, never a real engine's."""
    import llmtop

    return f"llmtop-sim/{llmtop.__version__}"


def metrics_paths(dialect: Dialect) -> tuple[str, ...]:
    """Where the sim serves its /metrics in this dialect."""
    return METRICS_PATHS.get(dialect.kind, ("/metrics",))


def info(dialect: Dialect, config: EngineConfig, model_name: str) -> dict[str, Any]:
    """The engine's info endpoint's answer (`dialect.info_path`): its kind, the sim's version,
    and the few fields that engine puts there for a reader of its capacity."""
    if dialect is VLLM:
        return {"version": VLLM_VERSION}
    version = sim_version()
    body: dict[str, Any] = {"engine": dialect.kind, "version": version}
    if dialect.kind == "sglang":  # /get_server_info: the server args and the token pool
        body |= {
            "served_model_name": model_name,
            "max_total_num_tokens": config.kv_tokens,
            "max_running_requests": config.max_num_seqs,
        }
    elif dialect.kind == "llamacpp":  # /props: build_info is its version, total_slots its -np
        body |= {
            "build_info": version,
            "total_slots": config.max_num_seqs,
            "model_alias": model_name,
            "default_generation_settings": {"n_ctx": config.max_model_len},
        }
    elif dialect.kind == "tgi":  # /info
        body |= {"model_id": model_name, "max_concurrent_requests": config.max_num_seqs}
    return body
