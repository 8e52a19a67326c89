"""The sim exports every vllm:* family llmtop reads from a real vLLM, with the same type and
label names, so what works on `llmtop demo` works on the real thing.

The reference is a capture from real vLLM 0.32.0 under load (tests/fixtures/metrics-load.txt);
tests/real/test_sim_families_real.py makes the same comparison against a live vLLM. The families
"llmtop reads" are those holding a sample name in llmtop.core.vllm.names.sample_names() (the
parser's keep-list), so a family added to llmtop's reading is checked here without an edit.
"""

from __future__ import annotations

from collections.abc import Callable

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.sim_families import (
    FIXTURE,
    missing_or_different,
    read_by_llmtop,
    sim_metrics_after_traffic,
)


def test_reference_holds_the_families_llmtop_needs() -> None:
    """Guard against a vacuous pass: the capture has the core families under their 0.32 names."""
    read = read_by_llmtop(FIXTURE.read_text())
    for core in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:num_preemptions",
        "vllm:request_success",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:cache_config_info",
    ):
        assert core in read, core
    assert read["vllm:request_success"][0] == (
        "counter",
        frozenset({"engine", "finished_reason", "model_name"}),
    )


def test_sim_exports_every_family_llmtop_reads_from_real_vllm(
    start_sim: Callable[..., ServerThread],
) -> None:
    problems = missing_or_different(FIXTURE.read_text(), sim_metrics_after_traffic(start_sim))
    assert not problems, "\n".join(problems)
