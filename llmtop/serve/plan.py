"""`llmtop serve`'s arithmetic, pure: a model's config and the device memory -> KV capacity and
flags, by vLLM's sums (docs/serve.md): a token's KV is 2 x layers x KV heads x head dim x dtype
bytes; the budget is memory x --gpu-memory-utilization less the weights and an activation reserve
(assumed, and printed as one: vLLM measures its own); blocks are whole. `--max-model-len` fits
the KV (else vLLM refuses to start); `--max-num-seqs`: requests of the expected size it fits."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmtop.errors import UsageError

GIB = 1024**3
MAX_NUM_SEQS_CEILING = 1024
"""vLLM's largest default --max-num-seqs (GPUs of 70 GiB and more): a fit above it is capped."""
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}
DEFAULT_BLOCK_SIZE = {"gpu": 16, "cpu": 128}
"""vLLM's KV block size in tokens when --block-size is not given (CPU: observed on 0.32)."""


@dataclass(frozen=True)
class ModelShape:
    """The fields of a model's config.json that size its weights and its KV cache."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    dtype: str
    max_position_embeddings: int
    sliding_window: int | None
    """Tokens of KV a request keeps when every layer uses a sliding window; None otherwise."""
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str) -> ModelShape:
        """Read a Hugging Face config.json (a multimodal one's `text_config`)."""
        text = config.get("text_config")
        c: Mapping[str, Any] = text if isinstance(text, Mapping) else config

        def need(key: str) -> int:
            value = c.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UsageError(f"{name}: config.json has no positive integer {key!r}")
            return value

        heads = need("num_attention_heads")
        hidden = need("hidden_size")
        kv = c.get("num_key_value_heads") or heads
        head_dim = c.get("head_dim") or hidden // heads
        dtype = str(c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype") or "")
        window = c.get("sliding_window")
        if c.get("use_sliding_window") is False or c.get("layer_types") is not None:
            window = None  # off, or only some layers slide (Gemma-style): every token is kept
        return cls(
            name=name,
            layers=need("num_hidden_layers"),
            attention_heads=heads,
            kv_heads=int(kv),
            head_dim=int(head_dim),
            hidden_size=hidden,
            intermediate_size=int(c.get("intermediate_size") or 4 * hidden),
            vocab_size=need("vocab_size"),
            dtype=dtype or "bfloat16",
            max_position_embeddings=need("max_position_embeddings"),
            sliding_window=int(window) if isinstance(window, int) and window > 0 else None,
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        )

    def estimated_params(self) -> int:
        """Parameters of a Llama-style decoder (attention, gated MLP, embeddings), norms aside."""
        q_out = self.attention_heads * self.head_dim
        kv_out = self.kv_heads * self.head_dim
        attention = self.hidden_size * (2 * q_out + 2 * kv_out)
        mlp = 3 * self.hidden_size * self.intermediate_size
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.layers * (attention + mlp) + embeddings


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a torch/vLLM dtype name."""
    name = dtype.removeprefix("torch.").lower()
    if name not in DTYPE_BYTES:
        raise UsageError(f"unknown dtype {dtype!r} (known: {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class EngineArgs:
    """The vLLM flags among the pass-through arguments that change the arithmetic."""

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float = 0.92
    """vLLM's default in 0.32 (0.9 before)."""
    block_size: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    tensor_parallel_size: int = 1


_ENGINE_FLAGS: dict[str, tuple[str, type]] = {
    "--max-model-len": ("max_model_len", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--block-size": ("block_size", int),
    "--dtype": ("dtype", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--num-gpu-blocks-override": ("num_gpu_blocks_override", int),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", int),
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
}


def parse_engine_args(args: Sequence[str]) -> EngineArgs:
    """Pick the flags that matter out of `vllm serve` arguments (`--flag V` or `--flag=V`)."""
    found: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        if flag in _ENGINE_FLAGS:
            field, kind = _ENGINE_FLAGS[flag]
            if eq:
                text = inline
            elif i + 1 < len(args):
                i += 1
                text = args[i]
            else:
                raise UsageError(f"vLLM flag {flag} needs a value")
            try:
                found[field] = kind(text)
            except ValueError:
                raise UsageError(f"vLLM flag {flag}: {text!r} is not a {kind.__name__}") from None
        i += 1
    return EngineArgs(**found)


@dataclass(frozen=True)
class Memory:
    """Where the KV cache lives and how much room there is."""

    device: str
    """"gpu" or "cpu"."""
    total_bytes: int | None
    """One GPU's memory (None on CPU)."""
    source: str
    """Where the figure came from, in words (NVML and the GPU's name, --gpu-memory-gb, ...)."""
    cpu_kv_bytes: int | None = None
    """vLLM's CPU KV space (VLLM_CPU_KVCACHE_SPACE), on CPU."""


@dataclass(frozen=True)
class Weights:
    """The model's weight bytes and how they were found."""

    bytes: int
    source: str


@dataclass(frozen=True)
class Plan:
    """The capacity, the flags to add and the lines that show the arithmetic."""

    kv_bytes_per_token: int
    kv_budget_bytes: int
    block_size: int
    kv_blocks: int
    kv_tokens: int
    request_tokens: int
    """KV tokens one expected request holds (its prompt + output, or the sliding window)."""
    fits: int
    """Expected requests that fit in KV at once."""
    max_model_len: int
    max_num_seqs: int
    """The engine's batch cap, and the gateway's max concurrency."""
    engine_flags: tuple[str, ...]
    """Flags llmtop adds to `vllm serve` (the user's own win and are not repeated)."""
    lines: tuple[str, ...]


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def make_plan(
    shape: ModelShape,
    engine: EngineArgs,
    memory: Memory,
    weights: Weights,
    *,
    expect_prompt_tokens: int,
    expect_output_tokens: int,
    reserve_bytes: int,
) -> Plan:
    """Work out the KV capacity and the flags for the expected request size, with the sums."""
    if expect_prompt_tokens < 1 or expect_output_tokens < 1:
        raise UsageError("--expect-prompt-tokens and --expect-output-tokens must be at least 1")
    model_dtype = shape.dtype if engine.dtype in (None, "auto") else str(engine.dtype)
    kv_dtype = model_dtype
    if engine.kv_cache_dtype not in (None, "auto"):
        kv_dtype = str(engine.kv_cache_dtype)
    kv_elem = dtype_bytes(kv_dtype)
    per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * kv_elem
    block = engine.block_size or DEFAULT_BLOCK_SIZE[memory.device]
    tp = engine.tensor_parallel_size
    lines = [
        f"model        {shape.name}: {shape.layers} layers, {shape.kv_heads} KV heads "
        f"(of {shape.attention_heads}) x head dim {shape.head_dim}, {model_dtype}, "
        f"max_position_embeddings {shape.max_position_embeddings:,}",
        f"KV per token 2 (K,V) x {shape.layers} layers x {shape.kv_heads} KV heads x "
        f"{shape.head_dim} x {kv_elem} B ({kv_dtype}) = {per_token:,} B",
    ]
    if engine.num_gpu_blocks_override is not None:
        blocks = engine.num_gpu_blocks_override
        budget = blocks * block * per_token
        lines.append(f"KV blocks    {blocks:,} (--num-gpu-blocks-override)")
    else:
        if engine.kv_cache_memory_bytes is not None:
            budget = engine.kv_cache_memory_bytes
            lines.append(f"KV budget    {_gib(budget)} (--kv-cache-memory-bytes)")
        elif memory.device == "cpu":
            if memory.cpu_kv_bytes is None:
                raise UsageError(
                    "no GPU found: pass --gpu-memory-gb G for the GPU vLLM will use, or for "
                    "vLLM's CPU build set VLLM_CPU_KVCACHE_SPACE (GiB) or "
                    "--num-gpu-blocks-override N"
                )
            budget = memory.cpu_kv_bytes
            lines.append(f"KV budget    {_gib(budget)} ({memory.source})")
        else:
            assert memory.total_bytes is not None
            util = engine.gpu_memory_utilization
            usable = tp * memory.total_bytes * util
            budget = int(usable - weights.bytes - tp * reserve_bytes)
            lines += [
                f"memory       {tp} x {_gib(memory.total_bytes)} ({memory.source}) x {util:g} "
                f"gpu_memory_utilization = {_gib(usable)}",
                f"weights      - {_gib(weights.bytes)} ({weights.source})",
                f"reserve      - {tp} x {_gib(reserve_bytes)} activations and CUDA graphs "
                "(assumed: vLLM measures its own at start-up)",
                f"KV budget    = {_gib(budget)}",
            ]
            if budget <= 0:
                raise UsageError(
                    f"{shape.name} does not fit: the weights ({_gib(weights.bytes)}) and the "
                    f"reserve leave no KV room in {_gib(usable)}; add GPUs "
                    "(--tensor-parallel-size) or use a smaller or quantized model"
                )
        blocks = budget // (per_token * block)
        lines.append(
            f"KV blocks    {_gib(budget)} / ({per_token:,} B x {block} tokens per block) "
            f"= {blocks:,} blocks"
        )
    tokens = blocks * block
    lines.append(f"KV tokens    {blocks:,} x {block} = {tokens:,} tokens")
    asked = expect_prompt_tokens + expect_output_tokens
    request = asked
    if shape.sliding_window is not None and shape.sliding_window < asked:
        request = shape.sliding_window
    lines.append(
        f"request      {expect_prompt_tokens:,} prompt + {expect_output_tokens:,} output = "
        f"{asked:,} tokens"
        + (f", KV held capped by the sliding window: {request:,}" if request != asked else "")
    )
    if tokens < request:
        raise UsageError(
            f"one expected request ({request:,} tokens) does not fit in the KV cache "
            f"({tokens:,} tokens): expect shorter requests or give vLLM more memory"
        )
    flags: list[str] = []
    if engine.max_model_len is not None:
        max_len = engine.max_model_len
        lines.append(f"--max-model-len {max_len:,} (yours)")
    else:
        kv_bound = tokens if shape.sliding_window is None else math.inf
        max_len = int(min(shape.max_position_embeddings, kv_bound))
        flags += ["--max-model-len", str(max_len)]
        why = (
            f"min(max_position_embeddings {shape.max_position_embeddings:,}, KV tokens {tokens:,})"
            if shape.sliding_window is None
            else "max_position_embeddings (a sliding window keeps KV per request bounded)"
        )
        lines.append(f"--max-model-len {max_len:,}  = {why}")
    fits = tokens // request
    if engine.max_num_seqs is not None:
        seqs = engine.max_num_seqs
        lines.append(
            f"--max-num-seqs {seqs:,} (yours; {fits:,} expected requests fit in KV: "
            f"{tokens:,} // {request:,})"
        )
    else:
        seqs = min(fits, MAX_NUM_SEQS_CEILING)
        flags += ["--max-num-seqs", str(seqs)]
        capped = f", capped at {MAX_NUM_SEQS_CEILING}" if seqs < fits else ""
        lines.append(
            f"--max-num-seqs {seqs:,}  = {tokens:,} KV tokens // {request:,} per request"
            f"{capped} (more at once would preempt)"
        )
    lines.append(
        f"gateway      --max-concurrency {seqs:,} (its cap without the autopilot; with it,"
        " where it starts)"
    )
    return Plan(
        kv_bytes_per_token=per_token,
        kv_budget_bytes=budget,
        block_size=block,
        kv_blocks=blocks,
        kv_tokens=tokens,
        request_tokens=request,
        fits=fits,
        max_model_len=max_len,
        max_num_seqs=seqs,
        engine_flags=tuple(flags),
        lines=tuple(lines),
    )
