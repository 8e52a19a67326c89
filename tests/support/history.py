"""The gateway history tests' polls: a fake clock and a poll whose samples move, with a gateway
document and, every tenth poll, a limit change (tests/unit/test_history_*.py)."""

from __future__ import annotations

from typing import Any

from llmtop.core.base.raw import RawEngine, RawPoll, Sample

T0 = 1_800_000_000.0
ENGINE = "http://127.0.0.1:8000"


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def poll(i: int, t: float | None = None) -> RawPoll:
    """A poll whose samples move (a counter, a gauge, one that stays), with a gateway document
    and, every tenth poll, a limit change."""
    samples = (
        Sample("vllm:generation_tokens_total", (("model_name", "m"),), 100.0 * i),
        Sample("vllm:num_requests_waiting", (("model_name", "m"),), float(i % 7)),
        Sample("vllm:cache_config_info", (("num_gpu_blocks", "2048"),), 1.0),
    )
    events: tuple[dict[str, Any], ...] = ()
    if i % 10 == 5:
        events = (
            {"time": T0 + i, "field": "max_concurrency", "old": 8, "new": 4, "source": "bob"},
        )
    return RawPoll(
        time=T0 + i if t is None else t,
        engines=(RawEngine(ENGINE, samples, engine="vllm"),),
        gateway_url="http://127.0.0.1:9000",
        gateway={"in_flight": i % 5, "queued": i % 3, "limits": {"max_concurrency": 8}},
        events=events,
    )
