"""Local GPUs through NVML (nvidia-ml-py), synchronously; `gpu.NvmlBackend` runs it in a thread.

pynvml is imported lazily so machines without it (or without a driver) start fast and report
"no NVIDIA GPU visible" instead of crashing. A field a GPU does not support is None.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from llmtop.core.base.snapshot import GpuStats

T = TypeVar("T")

NO_GPU = "no NVIDIA GPU visible"

THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock_setting"),
)
"""NVML's clocks-event (throttle) reason bits; dcgm-exporter exports the same mask."""


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the set bits, leaving out gpu_idle (an idle GPU is not a problem)."""
    return tuple(name for bit, name in THROTTLE_BITS if mask & bit and name != "gpu_idle")


class NvmlUnavailable(Exception):
    """No NVML library, no driver, or no device: nothing to show, nothing wrong."""


def _opt(fn: Callable[[], T]) -> T | None:
    """A field read that may be unsupported on this GPU."""
    try:
        return fn()
    except Exception:
        return None


class NvmlReader:
    """Holds the NVML session; `read` returns every local GPU's stats."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def _init(self) -> Any:
        if self._nvml is not None:
            return self._nvml
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable(f"{NO_GPU} (nvidia-ml-py not installed)") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise NvmlUnavailable(f"{NO_GPU} ({e})") from None
        self._nvml = pynvml
        return pynvml

    def read(self) -> tuple[GpuStats, ...]:
        """Every device's stats; raises NvmlUnavailable or pynvml.NVMLError."""
        nv = self._init()
        count = nv.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable(NO_GPU)
        return tuple(self._device(nv, i) for i in range(count))

    def _device(self, nv: Any, index: int) -> GpuStats:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        name = _opt(lambda: nv.nvmlDeviceGetName(h))
        if isinstance(name, bytes):
            name = name.decode()
        util = _opt(lambda: nv.nvmlDeviceGetUtilizationRates(h))
        mem = _opt(lambda: nv.nvmlDeviceGetMemoryInfo(h))
        power_mw = _opt(lambda: nv.nvmlDeviceGetPowerUsage(h))
        limit_mw = _opt(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
        temp = _opt(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        sm = _opt(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        mask = _opt(lambda: reasons_fn(h)) if reasons_fn is not None else None
        procs = _opt(lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)) or []
        return GpuStats(
            index=index,
            name=name,
            source="nvml",
            util_frac=None if util is None else util.gpu / 100.0,
            mem_bw_util_frac=None if util is None else util.memory / 100.0,
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            temp_c=None if temp is None else float(temp),
            sm_clock_mhz=None if sm is None else float(sm),
            throttle_reasons=() if mask is None else decode_throttle_reasons(int(mask)),
            processes=tuple(self._process(nv, p) for p in procs),
        )

    def _process(self, nv: Any, proc: Any) -> str:
        pid = int(proc.pid)
        name = _opt(lambda: nv.nvmlSystemGetProcessName(pid))
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        used = getattr(proc, "usedGpuMemory", None)
        mem = f" {used / 2**30:.1f} GiB" if isinstance(used, int) and used > 0 else ""
        label = str(name).rsplit("/", 1)[-1] if name else "?"
        return f"{pid} {label}{mem}"

    def close(self) -> None:
        """Release NVML (safe to call when it was never initialised)."""
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
