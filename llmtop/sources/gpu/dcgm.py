"""GPUs on another host through dcgm-exporter's /metrics (also the sim's /dcgm/metrics).

`DCGM_FI_DEV_*` fields, labels matched case-insensitively (deployments differ); memory in MiB,
utilisation in percent; a field not exported stays None.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from typing import Any

import httpx

from llmtop.core.base.raw import Sample
from llmtop.core.base.snapshot import GpuStats
from llmtop.core.exposition import promtext
from llmtop.sources.gpu.nvml import decode_throttle_reasons
from llmtop.sources.http.clients import http_client
from llmtop.sources.vllm import describe_error, fetch_text

MIB = 2**20
DCGM_KEEP = promtext.keep_prefix("DCGM_FI_")


def _label(s: Sample, key: str) -> str | None:
    for k, v in s.labels:
        if k.lower() == key.lower():
            return v
    return None


def parse_dcgm(samples: tuple[Sample, ...]) -> tuple[GpuStats, ...]:
    """One GpuStats per `gpu` label value (per host when a Hostname label is present)."""
    by_gpu: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    names: dict[tuple[str, str], str] = {}
    for s in samples:
        gpu = _label(s, "gpu")
        if gpu is None:
            continue
        key = (_label(s, "Hostname") or "", gpu)
        by_gpu[key][s.name] = s.value
        model = _label(s, "modelName")
        if model:
            names[key] = model
    out: list[GpuStats] = []
    for key in sorted(by_gpu, key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0)):
        f = by_gpu[key]
        used, free = f.get("DCGM_FI_DEV_FB_USED"), f.get("DCGM_FI_DEV_FB_FREE")
        reserved = f.get("DCGM_FI_DEV_FB_RESERVED", 0.0)
        util, mem_util = f.get("DCGM_FI_DEV_GPU_UTIL"), f.get("DCGM_FI_DEV_MEM_COPY_UTIL")
        mask = f.get(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", f.get("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
        )
        host, gpu = key
        out.append(
            GpuStats(
                index=int(gpu) if gpu.isdigit() else len(out),
                name=f"{names[key]} @ {host}" if host and key in names else names.get(key),
                source="dcgm",
                util_frac=None if util is None else util / 100.0,
                mem_bw_util_frac=None if mem_util is None else mem_util / 100.0,
                mem_used_bytes=None if used is None else int(used * MIB),
                mem_total_bytes=None
                if used is None or free is None
                else int((used + free + reserved) * MIB),
                power_w=f.get("DCGM_FI_DEV_POWER_USAGE"),
                power_limit_w=f.get("DCGM_FI_DEV_POWER_MGMT_LIMIT"),
                temp_c=f.get("DCGM_FI_DEV_GPU_TEMP"),
                sm_clock_mhz=f.get("DCGM_FI_DEV_SM_CLOCK"),
                throttle_reasons=() if mask is None else decode_throttle_reasons(int(mask)),
                **_faults(f),
            )
        )
    return tuple(out)


def _finite(f: dict[str, float], *names: str) -> float | None:
    """The first of these fields exported with a finite value (NaN, Inf: unknown)."""
    for name in names:
        v = f.get(name)
        if v is not None and math.isfinite(v):
            return v
    return None


def _faults(f: dict[str, float]) -> dict[str, Any]:
    """XID and ECC errors (`gpu-xid-error`): the last XID, volatile DBE/SBE counts, else the
    remapped rows (H100 and later count errors as row remaps)."""
    xid = _finite(f, "DCGM_FI_DEV_XID_ERRORS")
    return {
        "xid_last": None if xid is None else int(xid),
        "ecc_uncorrectable": _finite(
            f, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
        ),
        "ecc_correctable": _finite(
            f, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
        ),
    }


class DcgmBackend:
    """A `GpuBackend` reading a dcgm-exporter /metrics URL."""

    def __init__(
        self,
        url: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 2.0,
        max_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._own = client is None
        self._client = client or http_client(timeout_s)

    async def read(self) -> tuple[tuple[GpuStats, ...], str | None]:
        """(gpus, error); never raises for an exporter problem."""
        try:
            text = await asyncio.wait_for(
                fetch_text(self._client, self.url, max_bytes=self.max_bytes, what="DCGM metrics"),
                self.timeout_s,
            )
            gpus = parse_dcgm(promtext.parse(text, DCGM_KEEP))
        except Exception as e:
            return (), f"dcgm-exporter: {describe_error(self.url, e, self.timeout_s)}"
        if not gpus:
            return (), f"dcgm-exporter at {self.url} exports no GPU"
        return gpus, None

    async def aclose(self) -> None:
        """Close the HTTP client if this backend made it."""
        if self._own:
            await self._client.aclose()
