"""`llmtop load` against a real vLLM: what it reports agrees with vLLM's own counters."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.vllm_client import scrape, wait_idle

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(300)]


def _load(url: str, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "llmtop", "load", "--url", url, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_load_figures_match_vllm_counters(idle_vllm: str, chat: bool) -> None:
    before = scrape(idle_vllm)
    args = ["--concurrency", "4", "--requests", "8", "--prompt-tokens", "200"]
    args += ["--output-tokens", "50", "--duration-s", "200"]
    out = _load(idle_vllm, *args, *(["--chat"] if chat else []))
    after = wait_idle(idle_vllm)

    def delta(name: str, **labels: str) -> float:
        return after.need(name, **labels) - before.need(name, **labels)

    assert (out["offered"], out["ok"], out["errors"], out["cut"]) == (8, 8, 0, 0)
    # Token counts are the server's usage figures: they must equal vLLM's counters exactly.
    assert out["output_tokens"] == delta("vllm:generation_tokens_total") == 8 * 50
    assert out["prompt_tokens"] == delta("vllm:prompt_tokens_total")
    if not chat:
        assert out["prompt_tokens"] == 8 * 200  # token-id prompts: exact length
    assert delta("vllm:request_success_total", finished_reason="length") == 8
    assert delta("vllm:time_to_first_token_seconds_count") == 8
    # The client's TTFT includes the network and the API server: never below vLLM's mean.
    ttft_sum = delta("vllm:time_to_first_token_seconds_sum")
    assert out["ttft"]["mean_s"] * 8 >= ttft_sum * 0.9
