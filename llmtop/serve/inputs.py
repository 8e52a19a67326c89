"""What `llmtop serve`'s arithmetic reads: the model directory and the device memory.

The model must be a local directory with a config.json (llmtop reads no network; vLLM would fetch
a hub name). Weight bytes are the weight files' sizes, else estimated from the config; the memory
is the first GPU's (NVML), a stated figure, or on CPU vLLM's VLLM_CPU_KVCACHE_SPACE (GiB)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from llmtop.errors import UsageError
from llmtop.serve.plan import GIB, Memory, ModelShape, Weights, dtype_bytes

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def read_model(model: str) -> tuple[ModelShape, Path]:
    """The shape from MODEL/config.json (MODEL may also name the config.json itself)."""
    path = Path(model).expanduser()
    config = path / "config.json" if path.is_dir() else path
    gguf = path.suffix.lower() == ".gguf" or (
        path.is_dir() and not config.is_file() and any(path.glob("*.gguf"))
    )
    if gguf:  # llama.cpp's format: not a model this plan can read, nor one serve starts
        raise UsageError(
            f"{model}: a GGUF model (llama.cpp's format); llmtop serve plans vLLM from a model "
            "directory with config.json. For llama.cpp, start llama-server --metrics yourself "
            "and put `llmtop gateway --engine URL --autopilot` in front of it"
        )
    if not config.is_file():
        raise UsageError(
            f"{model}: no config.json there; llmtop serve needs a local model directory "
            "(download it first, e.g. `hf download ORG/NAME --local-dir DIR`)"
        )
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{config}: not a readable JSON config ({e})") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"{config}: not a JSON object")
    name = (path if path.is_dir() else path.parent).resolve().name
    return ModelShape.from_config(data, name), config.parent


def weights(shape: ModelShape, model_dir: Path, dtype: str) -> Weights:
    """Bytes of the weight files in the model directory, or the config's estimate."""
    files = [p for p in model_dir.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)]
    safetensors = [p for p in files if p.name.endswith(".safetensors")]
    chosen = safetensors or files  # a repo with both formats loads the safetensors
    if chosen:
        total = sum(p.stat().st_size for p in chosen)
        return Weights(total, f"{len(chosen)} weight file(s) in {model_dir.name}")
    params = shape.estimated_params()
    size = dtype_bytes(dtype)
    return Weights(
        params * size, f"{params / 1e9:.2f} B parameters x {size} B, estimated from config.json"
    )


def device_memory(
    gpu_memory_gb: float | None,
    *,
    read_gpus: Callable[[], list[tuple[str, int]]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Memory:
    """The memory the KV cache comes out of: stated, NVML's first GPU, or vLLM's CPU KV space."""
    env = os.environ if environ is None else environ
    if gpu_memory_gb is not None:
        if gpu_memory_gb <= 0:
            raise UsageError("--gpu-memory-gb must be positive")
        return Memory("gpu", int(gpu_memory_gb * GIB), "--gpu-memory-gb")
    gpus = (read_gpus or _nvml_gpus)()
    if gpus:
        name, total = gpus[0]
        return Memory("gpu", total, f"NVML: {name}")
    space = env.get("VLLM_CPU_KVCACHE_SPACE")
    cpu_kv = None
    if space:
        try:  # vLLM reads it with int(): "0.5" would stop vLLM itself
            cpu_kv = int(space) * GIB
        except ValueError:
            raise UsageError(
                f"VLLM_CPU_KVCACHE_SPACE={space!r}: vLLM wants a whole number of GiB"
            ) from None
    return Memory("cpu", None, f"VLLM_CPU_KVCACHE_SPACE={space} GiB", cpu_kv_bytes=cpu_kv)


def _nvml_gpus() -> list[tuple[str, int]]:
    """(name, total memory bytes) of each NVIDIA GPU; empty without a driver."""
    from llmtop.sources.gpu.nvml import NvmlReader, NvmlUnavailable

    reader = NvmlReader()
    try:
        return [(g.name or f"GPU {g.index}", g.mem_total_bytes or 0) for g in reader.read()]
    except NvmlUnavailable:
        return []
    except Exception:  # an NVML error is "no GPU here" for this purpose, not a crash
        return []
    finally:
        reader.close()
