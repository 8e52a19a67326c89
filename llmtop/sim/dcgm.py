"""Telemetry of the simulated GPU in NVIDIA dcgm-exporter's text format; pure (engine, clock in).

Roofline: GPU_UTIL is the share of time a step ran, MEM_COPY_UTIL the memory pipe's, so decode
reads memory-bound and a prefill burst compute-bound. Every field: docs/sim.md, /dcgm/metrics.
"""

from __future__ import annotations

import math
from collections import deque

from llmtop.sim.model import Engine

MIB = 1024 * 1024
WINDOW_S = 1.0
"""Utilisation is averaged over at least this much time, like DCGM's sampling."""
THERMAL_TAU_S = 30.0
IDLE_CLOCK_MHZ = 210
AMBIENT_C = 32.0
HOT_C = 78.0

_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
)


class DcgmTelemetry:
    """Samples the engine's busy-time counters at each scrape and renders dcgm-exporter text."""

    def __init__(self, engine: Engine, now_s: float, hostname: str = "llmtop-sim") -> None:
        self.engine = engine
        p = engine.config.profile
        self._samples: deque[tuple[float, float, float, float]] = deque(maxlen=64)
        self._samples.append((now_s, 0.0, 0.0, 0.0))
        self._temp_c = AMBIENT_C + 8.0
        self._temp_at = now_s
        self._energy_mj = 0.0
        self._energy_at = now_s
        self._power_w = p.idle_watts
        self._labels = (
            f'gpu="0",UUID="GPU-5e1a7a0b-{p.name[:4].ljust(4, "0").encode().hex()}'
            f'-0000-0000-000000000000",pci_bus_id="00000000:01:00.0",device="nvidia0",'
            f'modelName="{p.gpu_name}",Hostname="{hostname}"'
        )
        total_mib = p.gpu_memory_bytes // MIB
        used = min(p.gpu_memory_bytes * p.gpu_memory_utilization, p.gpu_memory_bytes)
        self._fb_used_mib = int(used // MIB)
        self._fb_free_mib = int(total_mib - self._fb_used_mib)

    def utilisation(self, now_s: float) -> tuple[float, float, float]:
        """(busy, memory, compute) shares of the last window, each 0..1."""
        st = self.engine.stats
        current = (now_s, st.busy_s, st.memory_s, st.compute_s)
        base = self._samples[0]
        for sample in self._samples:
            if now_s - sample[0] >= WINDOW_S:
                base = sample
            else:
                break
        if now_s - self._samples[-1][0] >= 0.1:
            self._samples.append(current)
        while len(self._samples) > 1 and now_s - self._samples[1][0] >= WINDOW_S:
            self._samples.popleft()
        span = now_s - base[0]
        if span <= 0:
            return 0.0, 0.0, 0.0
        # The engine runs at most one step ahead of the clock: clip to the window.
        busy = min(max((current[1] - base[1]) / span, 0.0), 1.0)
        memory = min(max((current[2] - base[2]) / span, 0.0), 1.0)
        compute = min(max((current[3] - base[3]) / span, 0.0), 1.0)
        return busy, memory, compute

    def render(self, now_s: float) -> str:
        """The exposition text of one scrape at `now_s` (the engine's clock)."""
        p = self.engine.config.profile
        busy, memory, compute = self.utilisation(now_s)
        activity = 0.4 * busy + 0.6 * max(memory, compute)
        power = p.idle_watts + (p.max_watts - p.idle_watts) * activity
        dt = max(now_s - self._energy_at, 0.0)
        self._energy_mj += 0.5 * (power + self._power_w) * dt * 1000.0
        self._energy_at = now_s
        self._power_w = power
        target = (
            AMBIENT_C
            + 8.0
            + (HOT_C - AMBIENT_C - 8.0)
            * (power - p.idle_watts)
            / max(p.max_watts - p.idle_watts, 1.0)
        )
        lag = 1.0 - math.exp(-max(now_s - self._temp_at, 0.0) / THERMAL_TAU_S)
        self._temp_c += (target - self._temp_c) * lag
        self._temp_at = now_s
        sm_clock = p.sm_clock_mhz if busy > 0.01 else IDLE_CLOCK_MHZ
        mem_clock = 405 if busy <= 0.01 else 1593
        values = (
            sm_clock,
            mem_clock,
            round(self._temp_c),
            round(power, 3),
            p.max_watts,
            round(self._energy_mj),
            round(busy * 100),
            round(memory * 100),
            self._fb_free_mib,
            self._fb_used_mib,
        )
        out: list[str] = []
        for (name, kind, help_), value in zip(_FIELDS, values, strict=True):
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            out.append(f"{name}{{{self._labels}}} {value}")
        out.append("")
        return "\n".join(out)
