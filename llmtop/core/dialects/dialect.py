"""What a dialect is: an engine's own families mapped onto vLLM's names (llmtop's canonical
vocabulary, the richest exposition), so one reader, one window and one set of rules serve every
engine. Pure. A figure a dialect lacks stays absent (None, shown `n/a`) with the reason it lacks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmtop.core.base.raw import Labels, Sample
from llmtop.core.vllm.names import CACHE_CONFIG, FINISHED

PREFIX_QUERIES = "vllm:prefix_cache_queries_total"

FIGURES = (
    "running", "waiting", "kv_usage", "kv_capacity", "prompt_tokens", "generation_tokens",
    "ttft", "itl", "e2e", "queue_time", "preemptions", "prefix_cache", "spec_decode", "finished",
    "live_tokens",
)  # fmt: skip
"""The figures a dialect maps or lacks: the panels and the findings' inputs (`live_tokens`:
generated tokens counted as they are made, not when a request ends)."""


@dataclass(frozen=True)
class Dialect:
    """One engine's exposition: its prefix, its names -> vLLM's, what it lacks and why."""

    kind: str
    """`--engine-kind`'s word: vllm, sglang, llamacpp, trtllm, lmdeploy, dynamo, tgi."""
    title: str
    prefix: str
    renames: Mapping[str, str]
    """Its sample name -> vLLM's sample name (a histogram's `_bucket`, `_sum`, `_count` each)."""
    lacks: Mapping[str, str] = field(default_factory=dict)
    """Figure (`FIGURES`) -> why this engine has none, in a user's words."""
    metrics_switch: str = ""
    """How to make the engine export its metrics (`stats-disabled`'s advice)."""
    seats: str = "restart vLLM with --max-num-seqs {n}"
    """How to bound the engine's own concurrency at {n}, the cap advice's other way: "restart
    X with --flag {n}" (without a figure, "with a lower --flag")."""
    default_port: int = 8000
    metrics_path: str = "/metrics"
    """Where it serves its Prometheus text (trtllm-serve: /prometheus/metrics)."""
    info_path: str = "/version"
    """Where it says its version (and, for some, its slots and capacity)."""
    source: str = ""
    """The engine's file and version the mapping was read from."""
    capacity: tuple[str, str | None] | None = None
    """(a gauge of its KV blocks, a gauge of tokens per block or None for tokens): its KV
    capacity, read as vLLM's `cache_config_info`."""
    queries: tuple[str, ...] = ()
    """Its samples that also count as vLLM's prefix-cache queries, added up (SGLang's prompt
    tokens; llama.cpp's prompt tokens computed and those it found cached)."""
    finished: Mapping[str, str] = field(default_factory=dict)
    """Its counter of finished requests -> the finished_reason it counts as."""
    keep_label: tuple[str, str] | None = None
    """(label, value): only samples with that label at that value, or without it, are read
    (SGLang's `tp_rank` 0: every rank of one scheduler exports the same requests)."""

    def names(self) -> frozenset[str]:
        """Every sample name of its own that this dialect reads (the parser's keep-list)."""
        capacity = [n for n in self.capacity or () if n is not None]
        return frozenset((*self.renames, *self.finished, *capacity))

    def translate(self, samples: tuple[Sample, ...]) -> tuple[Sample, ...]:
        """Its samples under vLLM's names; a family it does not map is left out."""
        out: list[Sample] = []
        renames, finished, keep = self.renames, self.finished, self.keep_label
        blocks: list[Sample] = []
        per_block: float | None = None
        for s in samples:
            if keep is not None and not _kept(s.labels, keep):
                continue
            name = renames.get(s.name)
            if name is not None:
                out.append(Sample(name, s.labels, s.value))
                if s.name in self.queries:
                    out.append(Sample(PREFIX_QUERIES, s.labels, s.value))
            elif s.name in finished:
                labels = (*s.labels, ("finished_reason", finished[s.name]))
                out.append(Sample(FINISHED, labels, s.value))
            elif self.capacity is not None:
                if s.name == self.capacity[0]:
                    blocks.append(s)
                elif s.name == self.capacity[1]:
                    per_block = s.value
        size = 1 if self.capacity is None or self.capacity[1] is None else per_block
        for s in blocks:
            if s.value > 0 and size and size > 0:
                info = (("block_size", str(int(size))), ("num_gpu_blocks", str(int(s.value))))
                out.append(Sample(CACHE_CONFIG, (*_engine(s.labels), *info), 1.0))
        return tuple(out)


def _kept(labels: Labels, keep: tuple[str, str]) -> bool:
    key, value = keep
    return all(v == value for k, v in labels if k == key)


def _engine(labels: Labels) -> Labels:
    """The data-parallel rank as vLLM's `engine` label, so capacity sums over ranks."""
    return tuple(("engine", v) for k, v in labels if k == "dp_rank")


def histogram(theirs: str, ours: str) -> dict[str, str]:
    """A histogram family's three sample names, theirs -> vLLM's."""
    return {f"{theirs}{s}": f"{ours}{s}" for s in ("_bucket", "_sum", "_count")}


def prefixed(prefix: str, names: tuple[str, ...]) -> dict[str, str]:
    """Names vLLM exports under `vllm:` and this engine under its own prefix (LMDeploy)."""
    return {prefix + n: "vllm:" + n for n in names}
