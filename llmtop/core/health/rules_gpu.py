"""The field guide's GPU rules: XID and ECC errors from dcgm-exporter, and one GPU of a
tensor-parallel engine idle while the others work. Pure checks over a `Context`."""

from __future__ import annotations

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import Severity
from llmtop.core.health.rulebase import Context, Verdict
from llmtop.core.health.slo_policy import heads_up, worst_reading

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
        "check that vLLM's --tensor-parallel-size covers these GPUs and that no rank is stuck "
        "(nvidia-smi; the engine log of each worker)",
        severity=slo.severity("warning"),
    )
