"""A GPU backend for tests: scripted readings in place of NVML or dcgm-exporter."""

from __future__ import annotations

from collections.abc import Sequence

from llmtop.core.base.snapshot import GpuStats


class FakeGpuBackend:
    """Scripted readings: each read returns the next item (the last one repeats)."""

    def __init__(
        self, readings: Sequence[tuple[tuple[GpuStats, ...], str | None] | Exception]
    ) -> None:
        self._readings = list(readings)
        self.calls = 0

    async def read(self) -> tuple[tuple[GpuStats, ...], str | None]:
        item = self._readings[min(self.calls, len(self._readings) - 1)]
        self.calls += 1
        if isinstance(item, Exception):
            raise item
        return item
