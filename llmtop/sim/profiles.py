"""Hardware/model profiles of the simulated engine, as data.

The KV capacity follows from GPU and model as vLLM sizes it (`derived_kv_tokens`) unless the
profile or --kv-tokens pins it; which figure fixed each fitted constant: docs/sim.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from llmtop.errors import UsageError

GIB = 1024**3


@dataclass(frozen=True)
class Profile:
    """A simulated GPU and the model it serves; every size in bytes, every rate per second."""

    name: str
    description: str
    gpu_name: str
    gpu_memory_bytes: int
    """Frame-buffer size of the GPU."""
    bandwidth_bytes_per_s: float
    """Peak memory bandwidth (datasheet)."""
    flops_per_s: float
    """Peak dense 16-bit tensor FLOP/s (datasheet)."""
    params: float
    """Model parameters."""
    layers: int
    kv_heads: int
    head_dim: int
    heads: int = 32
    """Query heads (hidden size = heads x head_dim), for the attention FLOPs."""
    dtype_bytes: int = 2
    gpu_memory_utilization: float = 0.9
    """vLLM's --gpu-memory-utilization (default 0.9)."""
    reserved_bytes: int = 0
    """Activations, CUDA graphs and the allocator's slack, taken before the KV cache is sized."""
    kv_tokens: int | None = None
    """Pin the KV capacity instead of deriving it (the `fast` profile does)."""
    bandwidth_efficiency: float = 0.7
    """Share of the peak bandwidth a decode step achieves (fitted)."""
    flops_efficiency: float = 0.5
    """Share of the peak FLOP/s a prefill step achieves (fitted)."""
    step_overhead_s: float = 0.004
    """Fixed cost of one engine step: scheduling, sampling, kernel launches (fitted)."""
    block_size: int = 16
    max_model_len: int = 4096
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    """vLLM V1's default for the OpenAI server on GPUs under 70 GiB is 2048 (8192 above)."""
    idle_watts: float = 60.0
    max_watts: float = 300.0
    sm_clock_mhz: int = 1800

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights read by every forward pass."""
        return self.params * self.dtype_bytes

    @property
    def hidden_size(self) -> int:
        """Model width; attention costs 4 x layers x hidden FLOPs per token pair."""
        return self.heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V cached per token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def effective_bandwidth(self) -> float:
        """Bytes per second a step actually moves."""
        return self.bandwidth_bytes_per_s * self.bandwidth_efficiency

    @property
    def effective_flops(self) -> float:
        """FLOP per second a step actually computes."""
        return self.flops_per_s * self.flops_efficiency

    def derived_kv_tokens(self) -> int:
        """KV capacity in tokens as vLLM would size it (whole blocks)."""
        if self.kv_tokens is not None:
            return self.kv_tokens
        free = (
            self.gpu_memory_bytes * self.gpu_memory_utilization
            - self.weight_bytes
            - self.reserved_bytes
        )
        blocks = int(free // (self.kv_bytes_per_token * self.block_size))
        return max(blocks, 0) * self.block_size


PROFILES: dict[str, Profile] = {
    "seed": Profile(
        name="seed",
        description="20 GB GPU (1 TB/s, 260 TFLOP/s) serving a 7B GQA model in fp16",
        gpu_name="NVIDIA Simulated 20GB",
        gpu_memory_bytes=20 * GIB,
        bandwidth_bytes_per_s=1.0e12,
        flops_per_s=260e12,
        params=7.0e9,
        layers=32,
        kv_heads=8,
        head_dim=128,
        # 20 GiB x 0.9 - 14 GB - 0.225 GiB = 2,425 blocks of 16 = 38,800 tokens.
        reserved_bytes=int(0.225 * GIB),
        bandwidth_efficiency=0.81,
        flops_efficiency=0.80,
        step_overhead_s=0.012,
        max_model_len=8192,
        idle_watts=45.0,
        max_watts=250.0,
        sm_clock_mhz=1650,
    ),
    "h100-8b": Profile(
        name="h100-8b",
        description="80 GB H100 SXM (3.35 TB/s, 989 TFLOP/s) serving an 8B model in bf16",
        gpu_name="NVIDIA H100 80GB HBM3 (simulated)",
        gpu_memory_bytes=80 * GIB,
        bandwidth_bytes_per_s=3.35e12,
        flops_per_s=989e12,
        params=8.03e9,
        layers=32,
        kv_heads=8,
        head_dim=128,
        reserved_bytes=2 * GIB,
        bandwidth_efficiency=0.75,
        flops_efficiency=0.55,
        step_overhead_s=0.003,
        max_model_len=32768,
        max_num_batched_tokens=8192,
        idle_watts=70.0,
        max_watts=700.0,
        sm_clock_mhz=1980,
    ),
    "fast": Profile(
        name="fast",
        description="tiny model, 4,096-token KV cache: quick to fill, for tests and demos",
        gpu_name="NVIDIA Simulated Tiny",
        gpu_memory_bytes=8 * GIB,
        bandwidth_bytes_per_s=100e9,
        flops_per_s=20e12,
        params=0.1e9,
        layers=12,
        kv_heads=4,
        heads=12,
        head_dim=64,
        kv_tokens=4096,
        bandwidth_efficiency=0.8,
        flops_efficiency=0.5,
        step_overhead_s=0.002,
        max_model_len=2048,
        idle_watts=20.0,
        max_watts=120.0,
        sm_clock_mhz=1500,
    ),
}


def get_profile(name: str) -> Profile:
    """The named profile, or one read from a JSON file (a name ending in .json), or a UsageError
    listing the known ones."""
    if name.endswith(".json"):
        return read_profile_file(name)
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise UsageError(f"unknown sim profile {name!r} (known: {known})") from None


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "int | None": (int, type(None)),
}
_MAY_BE_ZERO = {"gpu_memory_bytes", "reserved_bytes", "step_overhead_s", "idle_watts"}


def read_profile_file(path: str) -> Profile:
    """A profile from a JSON object of Profile's fields, so the sim can run an engine fitted to a
    real one (`whatif.model.calibrate.synthetic_profile` of `llmtop whatif --json`'s fit)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"sim profile {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"sim profile {path}: not UTF-8 text") from None
    return profile_from_json(text, path)


def profile_from_json(text: str, where: str = "file") -> Profile:
    """Parse and check a profile's JSON; a UsageError names the first field that is wrong."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UsageError(f"sim profile {where}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"sim profile {where}: expected a JSON object of profile fields")
    fields = {f.name: f for f in dataclasses.fields(Profile)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UsageError(f"sim profile {where}: unknown field {unknown[0]!r}")
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING
        if name not in data:
            if required:
                raise UsageError(f"sim profile {where}: missing field {name!r}")
            continue
        value = data[name]
        ok = _TYPES[str(f.type)]
        if isinstance(value, bool) or not isinstance(value, ok):
            raise UsageError(f"sim profile {where}: {name} must be {f.type}, got {value!r}")
        if isinstance(value, (int, float)) and not (
            math.isfinite(value) and (value > 0 or (value == 0 and name in _MAY_BE_ZERO))
        ):
            raise UsageError(f"sim profile {where}: {name} must be positive, got {value!r}")
    return Profile(**data)
