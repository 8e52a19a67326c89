"""Hand-written vLLM 0.32-style scrapes for the fleet tests: `scrape` builds one replica's
/metrics text, `raw` wraps it as a poll's engine, `url(i)` names replica i."""

from __future__ import annotations

from llmtop.core.base.raw import RawEngine
from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import sample_names

KEEP = promtext.keep_names(sample_names())
TTFT_LE = ("0.1", "0.5", "1.0", "2.5", "5.0", "+Inf")


def scrape(
    t: float,
    *,
    running: float = 4,
    waiting: float = 0,
    kv: float = 0.3,
    decode: float = 100.0,
    slow_ttft: bool = False,
    engine: str = "0",
    since: float = 0.0,
) -> str:
    """A vLLM 0.32-style scrape at time t of an engine steady since `since` (counters grow)."""
    up = t - since
    lab = f'engine="{engine}",model_name="m"'
    done = 2.0 * up  # two requests a second
    ttft = [0.0, done, done, done, done, done] if not slow_ttft else [0, 0, 0, 0, 0, done]
    lines = [
        f"vllm:num_requests_running{{{lab}}} {running}",
        f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
        f'vllm:cache_config_info{{block_size="16",engine="{engine}",num_gpu_blocks="1000"}} 1',
        f"vllm:prompt_tokens_total{{{lab}}} {10 * decode * up}",
        f"vllm:generation_tokens_total{{{lab}}} {decode * up}",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {done}',
    ]
    for le, c in zip(TTFT_LE, ttft, strict=True):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {c}')
    lines.append(f"vllm:time_to_first_token_seconds_count{{{lab}}} {done}")
    lines.append(
        f"vllm:time_to_first_token_seconds_sum{{{lab}}} {done * (9 if slow_ttft else 0.3)}"
    )
    return "\n".join(lines) + "\n"


def raw(url: str, text: str | None) -> RawEngine:
    if text is None:
        return RawEngine(url, None, error=f"cannot connect to {url} (connection refused)")
    return RawEngine(url, promtext.parse(text, KEEP))


def url(i: int) -> str:
    return f"http://10.0.0.{i}:8000"
