"""GPU readings behind one protocol: NVML for local GPUs, dcgm-exporter for remote ones.

NVML (only here and in `gpu.nvml`) blocks, so it runs in `asyncio.to_thread`; no driver or library
is "no NVIDIA GPU visible", an NVMLError an error string: a GPU problem never crashes the TUI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from llmtop.core.base.snapshot import GpuStats
from llmtop.sources.gpu.nvml import NO_GPU, NvmlReader, NvmlUnavailable


class GpuBackend(Protocol):
    """Anything that can read GPUs: returns (gpus, error); never raises."""

    async def read(self) -> tuple[tuple[GpuStats, ...], str | None]: ...


class NvmlBackend:
    """Local GPUs through NVML, off the event loop."""

    def __init__(self, reader: NvmlReader | None = None) -> None:
        self._reader = reader or NvmlReader()
        self._unavailable: str | None = None
        self._pending: asyncio.Future[tuple[GpuStats, ...]] | None = None

    async def read(self) -> tuple[tuple[GpuStats, ...], str | None]:
        if self._unavailable is not None:
            return (), self._unavailable  # no driver: do not retry every poll
        # a timeout cannot stop a read's thread: while one hangs, start no other, or a hung
        # driver fills the default thread pool (which also resolves host names)
        if self._pending is not None and not self._pending.done():
            return (), "NVML: the previous read has not returned (driver hung?)"
        self._pending = asyncio.ensure_future(asyncio.to_thread(self._reader.read))
        self._pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            return await asyncio.shield(self._pending), None
        except NvmlUnavailable as e:
            self._unavailable = str(e)
            return (), self._unavailable
        except Exception as e:  # pynvml.NVMLError and anything else the binding raises
            return (), f"NVML: {e or type(e).__name__}"

    async def aclose(self) -> None:
        """Shut NVML down."""
        await asyncio.to_thread(self._reader.close)


class CombinedGpuBackend:
    """Several backends read concurrently; an absent local GPU is no error when others answer."""

    def __init__(self, backends: Sequence[GpuBackend]) -> None:
        self.backends = tuple(backends)

    async def read(self) -> tuple[tuple[GpuStats, ...], str | None]:
        results = await asyncio.gather(*(b.read() for b in self.backends), return_exceptions=True)
        gpus: list[GpuStats] = []
        errors: list[str] = []
        for r in results:
            if isinstance(r, BaseException):
                errors.append(f"GPU backend failed: {r}")
                continue
            gpus.extend(r[0])
            if r[1]:
                errors.append(r[1])
        if gpus:
            errors = [e for e in errors if not e.startswith(NO_GPU)]
        return tuple(gpus), "; ".join(errors) or None
