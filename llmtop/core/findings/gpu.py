"""The GPUs under the engines, read through NVML or dcgm-exporter by llmtop itself (so no
alert: Prometheus sees them only through dcgm-exporter's own series): throttled
(gpu-throttled), memory nearly full (gpu-memory-full), an XID or ECC error (gpu-xid-error),
one GPU of a tensor-parallel engine idle while the others work (tp-gpu-idle).
"""

from __future__ import annotations

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import Severity
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict
from llmtop.core.health.slo_policy import heads_up, worst_reading

THROTTLE_THERMAL = frozenset({"sw_thermal", "hw_thermal", "hw_slowdown"})


THROTTLE_POWER = frozenset({"sw_power_cap", "hw_power_brake"})


def gpu_throttled(ctx: Context) -> Verdict | None:
    for gpu in ctx.gpus:
        reasons = set(gpu.throttle_reasons)
        thermal, power = reasons & THROTTLE_THERMAL, reasons & THROTTLE_POWER
        if not (thermal or power):
            continue
        summary = (
            f"GPU {gpu.index} throttled ({', '.join(sorted(thermal | power))}) at "
            f"{fmt.celsius(gpu.temp_c)}, {fmt.watts(gpu.power_w)}/{fmt.watts(gpu.power_limit_w)}, "
            f"SM clock {fmt.mhz(gpu.sm_clock_mhz)}"
        )
        action = (
            "check cooling and airflow (nvidia-smi -q -d TEMPERATURE,PERFORMANCE); tokens/s "
            "stay lower until it clears"
            if thermal
            else "the GPU is at its power limit (nvidia-smi -q -d POWER); expect lower clocks "
            "under load, or raise the limit if the hardware allows"
        )
        slo = worst_reading(ctx, ctx.engines)  # a slowdown inside the SLO is a heads-up
        return Verdict(heads_up(slo, summary), action, severity=slo.severity("warning"))
    return None


GPU_THROTTLED = Definition(
    Rule("gpu-throttled", "warning", "gpu", gpu_throttled),
    guide=Guide("thermal/power throttling, memory nearly full", "cooling, power, other processes"),
    alert="llmtop reads the GPUs through NVML on its own host (or a dcgm-exporter URL given to "
    "it), not through Prometheus; alert on dcgm-exporter's DCGM_FI_DEV_CLOCK_THROTTLE_REASONS "
    "where it is scraped",
)


def gpu_memory_full(ctx: Context) -> Verdict | None:
    for gpu in ctx.gpus:
        if gpu.mem_used_bytes is None or not gpu.mem_total_bytes:
            continue
        used = gpu.mem_used_bytes / gpu.mem_total_bytes
        if used < ctx.settings.gpu_mem_high_frac:
            continue
        others = f"; processes: {', '.join(gpu.processes)}" if gpu.processes else ""
        return Verdict(
            f"GPU {gpu.index} memory {fmt.frac(used)} used ({fmt.gib(gpu.mem_used_bytes)} of "
            f"{fmt.gib(gpu.mem_total_bytes)}){others}"
        )
    return None


GPU_MEMORY_FULL = Definition(
    Rule("gpu-memory-full", "warning", "gpu", gpu_memory_full),
    advice="out-of-memory risk: stop other processes on the GPU or restart vLLM with a lower "
    "--gpu-memory-utilization",
    guide="gpu-throttled",
    alert="read through NVML on llmtop's host, as gpu-throttled; with dcgm-exporter: "
    "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
    reads=("gpu_mem_high_frac",),
)


FATAL_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})
"""XIDs after which the GPU's work is lost or it is about to be (NVIDIA's XID catalogue:
48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 94/95 contained /
uncontained ECC, 119/120 GSP): the engine on it fails next, whatever its latency now."""


def gpu_xid_error(ctx: Context) -> Verdict | None:
    """A GPU reported an XID error, or uncorrectable memory errors."""
    for gpu in ctx.gpus:
        xid = gpu.xid_last or 0
        dbe = gpu.ecc_uncorrectable or 0.0
        if not xid and not dbe:
            continue
        parts = []
        if xid:
            parts.append(f"XID {xid}")
        if dbe:
            parts.append(f"{dbe:.0f} uncorrectable ECC errors")
        what = f"GPU {gpu.index} reports {' and '.join(parts)}"
        if xid in FATAL_XIDS or dbe:
            return Verdict(
                f"{what}: a fault that loses the GPU's work; the engine on it fails next",
                "drain this GPU's engine and reset or replace the GPU (nvidia-smi -q -d "
                "ECC,ROW_REMAPPER; dmesg | grep -i xid)",
                severity="critical",
            )
        slo = worst_reading(ctx, ctx.engines)
        severity: Severity = slo.severity("warning")
        return Verdict(
            heads_up(slo, f"{what} (not one that loses the GPU)"),
            "read the XID in dmesg (NVIDIA's XID catalogue names its cause); watch for more",
            severity=severity,
        )
    return None


GPU_XID_ERROR = Definition(
    Rule("gpu-xid-error", "critical", "gpu", gpu_xid_error, immediate=True),
    guide=Guide(
        "dcgm-exporter reports an XID or uncorrectable ECC errors",
        "drain, reset or replace the GPU",
    ),
    alert="read through NVML or dcgm-exporter by llmtop, as gpu-throttled; alert on "
    "DCGM_FI_DEV_XID_ERRORS > 0 and DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 where it is scraped",
)


def tp_gpu_idle(ctx: Context) -> Verdict | None:
    """One GPU idle while the engine's others work: a tensor-parallel rank that stopped, or a
    GPU the engine does not use."""
    s = ctx.settings
    known = [g for g in ctx.gpus if g.util_frac is not None]
    if len(known) < 2:
        return None
    idle = [g for g in known if (g.util_frac or 0.0) < s.gpu_idle_frac]
    busy = [g for g in known if (g.util_frac or 0.0) >= s.gpu_busy_frac]
    if not idle or not busy or len(idle) + len(busy) != len(known) or len(idle) > len(busy):
        return None
    slo = worst_reading(ctx, ctx.engines)
    names = ", ".join(f"GPU {g.index} {fmt.frac(g.util_frac)}" for g in idle)
    floor = min(g.util_frac or 0.0 for g in busy)
    summary = f"{names} busy while {len(busy)} others are at {fmt.frac(floor)} or more"
    return Verdict(
        heads_up(slo, summary),
        severity=slo.severity("warning"),
    )


TP_GPU_IDLE = Definition(
    Rule("tp-gpu-idle", "info", "gpu", tp_gpu_idle),
    advice="check that vLLM's --tensor-parallel-size covers these GPUs and that no rank is stuck "
    "(nvidia-smi; the engine log of each worker)",
    guide=Guide(
        "one GPU idle while the others work", "check `--tensor-parallel-size` and each worker"
    ),
    alert="the GPUs are read by llmtop, as gpu-throttled; with dcgm-exporter: "
    "DCGM_FI_DEV_GPU_UTIL < 10 on one GPU of a host whose others are >= 50",
    reads=("gpu_idle_frac", "gpu_busy_frac"),
)

FINDINGS = (GPU_THROTTLED, GPU_MEMORY_FULL, GPU_XID_ERROR, TP_GPU_IDLE)
