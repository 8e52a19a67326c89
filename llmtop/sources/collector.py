"""One poll of every target, concurrently, each bounded below the poll interval; never raises.

`Collector.read` returns the raw inputs (`RawPoll`, what recordings store); `poll` also runs the
`Pipeline`, keeping the RawPoll in `last_raw`. A target problem fills an error field instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import GpuStats, Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import GatewayReader
from llmtop.sources.gpu.backend import CombinedGpuBackend, GpuBackend, NvmlBackend
from llmtop.sources.gpu.dcgm import DcgmBackend
from llmtop.sources.http.clients import http_client
from llmtop.sources.vllm import scrape_engine

DEFAULT_GATEWAY = MonitorSettings().gateway_url


def target_timeout(interval_s: float) -> float:
    """Per-target timeout: below the poll interval so one slow target never stalls a poll."""
    return max(0.2, min(interval_s * 0.8, 10.0))


def is_fleet(monitor: MonitorSettings) -> bool:
    """Whether the settings name a fleet rather than one engine (fleet_collector.py reads that;
    one engine needs no more than this module, so the TUI's start imports no fleet)."""
    many = monitor.targets_file or monitor.prometheus_url or monitor.k8s_selector
    many = many or monitor.inference_pool
    return bool(many or len(monitor.vllm_urls) > 1)


class Collector:
    """Reads vLLM engines, the gateway and GPUs; derives Snapshots through its `pipeline`."""

    def __init__(
        self,
        monitor: MonitorSettings,
        health: HealthSettings,
        *,
        gpu_backend: GpuBackend | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        window_s: float | None = None,
        max_num_seqs: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.monitor = monitor
        self.clock = clock
        self.timeout_s = timeout_s if timeout_s is not None else target_timeout(monitor.interval_s)
        self.pipeline = Pipeline(health, window_s=window_s, max_num_seqs=max_num_seqs)
        self.last_raw: RawPoll | None = None
        self._client = http_client(self.timeout_s, transport=transport)
        self._versions: dict[str, str | None] = {}
        """Engine URL -> its version (None: asked once, not answered; not asked again)."""
        self._kinds: dict[str, str | None] = {}
        """Engine URL -> the kind its first contact found (`vllm.identify`)."""
        self._gateway: GatewayReader | None = None
        if monitor.gateway_url:
            url = monitor.gateway_url
            optional = url.rstrip("/") == (DEFAULT_GATEWAY or "").rstrip("/")
            self._gateway = GatewayReader(url, monitor.admin_token, optional=optional)
        self._owned: list[Any] = []
        if gpu_backend is None:
            backends: list[GpuBackend] = []
            if monitor.nvml:
                backends.append(NvmlBackend())
            if monitor.dcgm_url:
                backends.append(
                    DcgmBackend(
                        monitor.dcgm_url,
                        client=self._client,
                        timeout_s=self.timeout_s,
                        max_bytes=monitor.max_scrape_bytes,
                    )
                )
            self._owned = list(backends)
            gpu_backend = CombinedGpuBackend(backends) if backends else None
        self.gpu_backend = gpu_backend

    async def read(self) -> RawPoll:
        """Everything one poll reads, all targets at once; never raises for a target problem."""
        t = self.clock()
        engines, gateway, gpus = await asyncio.gather(
            self._engines(), self._read_gateway(), self._gpus()
        )
        stats, gw_error, events, present = gateway
        return RawPoll(
            time=t,
            engines=engines,
            gateway_url=self._gateway.url if self._gateway is not None and present else None,
            gateway=stats,
            gateway_error=gw_error,
            gpus=gpus[0],
            gpu_error=gpus[1],
            events=events,
        )

    async def poll(self) -> Snapshot:
        """read() then the pipeline; the RawPoll stays in `last_raw` for the recorder."""
        raw = await self.read()
        self.last_raw = raw
        return self.pipeline.update(raw)

    async def _engines(self) -> tuple[RawEngine, ...]:
        """Every engine's scrape, all at once."""
        return tuple(await asyncio.gather(*(self._engine(u) for u in self.monitor.vllm_urls)))

    async def _engine(self, url: str) -> RawEngine:
        raw = await scrape_engine(  # never raises: a target problem is its error field
            self._client,
            url,
            timeout_s=self.timeout_s,
            max_bytes=self.monitor.max_scrape_bytes,
            version=self._versions.get(url),
            ask_version=url not in self._versions,
            engine=self._kinds.get(url),
            kind=self.monitor.engine_kind,
        )
        if raw.samples is not None and url not in self._versions:
            self._versions[url] = raw.version
            self._kinds[url] = raw.engine
        return raw

    async def _read_gateway(
        self,
    ) -> tuple[dict[str, Any] | None, str | None, tuple[dict[str, Any], ...], bool]:
        if self._gateway is None:
            return None, None, (), False
        return await self._gateway.read(self._client, self.timeout_s)  # never raises

    async def _gpus(self) -> tuple[tuple[GpuStats, ...], str | None]:
        if self.gpu_backend is None:
            return (), None
        try:
            return await asyncio.wait_for(self.gpu_backend.read(), self.timeout_s + 1.0)
        except TimeoutError:
            return (), f"GPU readings took longer than {self.timeout_s + 1.0:.1f} s"
        except Exception as e:
            return (), f"GPU readings failed: {e or type(e).__name__}"

    async def aclose(self) -> None:
        """Close the HTTP client and the GPU backends this collector made."""
        for b in self._owned:
            close = getattr(b, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        await self._client.aclose()
