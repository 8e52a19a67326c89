"""Counters and histograms the simulated engine keeps, with vLLM 0.32's bucket boundaries.

Pure data: the engine observes into them on its virtual clock, sim/metrics.py renders them. The
buckets are vllm/v1/metrics' (loggers.py, buckets.py), checked against metrics-load.txt.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # bounds as a row, the way vLLM lists them  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # bounds as a row, the way vLLM lists them  # fmt: skip
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # bounds as a row, the way vLLM lists them  # fmt: skip
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # bounds as a row, the way vLLM lists them  # fmt: skip
PREEMPTION_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 10, 20)
N_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20)


def one_two_five_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exponent
            if v > max_value:
                return tuple(out)
            out.append(float(v))
        exponent += 1


@dataclass(slots=True)
class Histogram:
    """Cumulative-on-render histogram: per-bucket counts, a sum and a count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: int = 1) -> None:
        """Record `n` observations of `value` (le is inclusive, like Prometheus)."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def cumulative(self) -> list[int]:
        """Counts per bound, cumulative, ending with +Inf."""
        out: list[int] = []
        acc = 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")


@dataclass(slots=True)
class EngineStats:
    """Everything /metrics exports that accumulates: counters and histograms."""

    max_model_len: int
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    admission_rejections: int = 0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0))
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    inference_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    prefill_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    decode_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITERATION_TOKENS_BUCKETS))
    request_preemptions: Histogram = field(default_factory=lambda: Histogram(PREEMPTION_BUCKETS))
    request_prompt_tokens: Histogram = field(init=False)
    request_generation_tokens: Histogram = field(init=False)
    request_max_tokens: Histogram = field(init=False)
    request_prefill_kv_computed: Histogram = field(init=False)
    params_max_tokens: Histogram = field(init=False)
    params_n: Histogram = field(default_factory=lambda: Histogram(N_BUCKETS))
    busy_s: float = 0.0
    """Virtual seconds spent in steps (the GPU was running kernels)."""
    memory_s: float = 0.0
    """Virtual seconds of the steps' memory-bound time (bytes moved / bandwidth)."""
    compute_s: float = 0.0
    """Virtual seconds of the steps' compute-bound time (FLOPs / FLOP/s)."""
    steps: int = 0
    longest_seq_tokens: int = 0
    """The longest finished sequence (prompt + generation): llama.cpp's n_tokens_max, spoken
    only in dialects that export it (vLLM has no such family)."""

    def __post_init__(self) -> None:
        token_buckets = one_two_five_buckets(self.max_model_len)
        self.request_prompt_tokens = Histogram(token_buckets)
        self.request_generation_tokens = Histogram(token_buckets)
        self.request_max_tokens = Histogram(token_buckets)
        self.request_prefill_kv_computed = Histogram(token_buckets)
        self.params_max_tokens = Histogram(token_buckets)
