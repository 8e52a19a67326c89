"""GPU backends: NVML through a stand-in pynvml module, dcgm-exporter text, the fake, combined."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from llmtop.core.base.snapshot import GpuStats
from llmtop.core.exposition import promtext
from llmtop.sources.gpu.backend import CombinedGpuBackend, NvmlBackend
from llmtop.sources.gpu.dcgm import DCGM_KEEP, DcgmBackend, parse_dcgm
from llmtop.sources.gpu.nvml import NvmlReader, decode_throttle_reasons
from tests.support.fake_gpu import FakeGpuBackend


class NVMLError(Exception):
    pass


def fake_pynvml(*, count: int = 1, init_error: bool = False, power_error: bool = False) -> Any:
    m = types.ModuleType("pynvml")
    ns: Any = m
    ns.NVMLError = NVMLError
    ns.NVML_TEMPERATURE_GPU = 0
    ns.NVML_CLOCK_SM = 1
    ns.shutdown_calls = 0

    def init() -> None:
        if init_error:
            raise NVMLError("Driver Not Loaded")

    def power(h: int) -> int:
        if power_error:
            raise NVMLError("Not Supported")
        return 287_000

    def shutdown() -> None:
        ns.shutdown_calls += 1

    ns.nvmlInit = init
    ns.nvmlShutdown = shutdown
    ns.nvmlDeviceGetCount = lambda: count
    ns.nvmlDeviceGetHandleByIndex = lambda i: i
    ns.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    ns.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=97, memory=61)
    ns.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=75 * 2**30, total=80 * 2**30)
    ns.nvmlDeviceGetPowerUsage = power
    ns.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    ns.nvmlDeviceGetTemperature = lambda h, kind: 71
    ns.nvmlDeviceGetClockInfo = lambda h, kind: 1980
    ns.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1 | 0x20
    ns.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=4242, usedGpuMemory=70 * 2**30)
    ]
    ns.nvmlSystemGetProcessName = lambda pid: b"/usr/bin/python3"
    return m


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], Any]:
    def put(module: Any) -> Any:
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return put


def test_throttle_reason_bits() -> None:
    assert decode_throttle_reasons(0x1) == ()
    assert decode_throttle_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal")


async def test_nvml_reads_every_field(install: Any) -> None:
    nv = install(fake_pynvml(count=2))
    backend = NvmlBackend()
    gpus, error = await backend.read()
    assert error is None
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert (g.util_frac, g.mem_bw_util_frac) == (0.97, 0.61)
    assert (g.mem_used_bytes, g.mem_total_bytes) == (75 * 2**30, 80 * 2**30)
    assert (g.power_w, g.power_limit_w, g.temp_c, g.sm_clock_mhz) == (287.0, 700.0, 71.0, 1980.0)
    assert g.throttle_reasons == ("sw_thermal",)
    assert g.processes == ("4242 python3 70.0 GiB",)
    await backend.aclose()
    assert nv.shutdown_calls == 1


async def test_nvml_unsupported_field_is_unknown(install: Any) -> None:
    install(fake_pynvml(power_error=True))
    gpus, error = await NvmlBackend().read()
    assert error is None
    assert gpus[0].power_w is None
    assert gpus[0].temp_c == 71.0


async def test_no_driver_is_no_gpu_visible(install: Any) -> None:
    install(fake_pynvml(init_error=True))
    backend = NvmlBackend()
    assert await backend.read() == ((), "no NVIDIA GPU visible (Driver Not Loaded)")
    assert (await backend.read())[1] == "no NVIDIA GPU visible (Driver Not Loaded)"


async def test_zero_devices_and_missing_library(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(fake_pynvml(count=0))
    assert await NvmlBackend().read() == ((), "no NVIDIA GPU visible")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    gpus, error = await NvmlBackend(NvmlReader()).read()
    assert gpus == ()
    assert error == "no NVIDIA GPU visible (nvidia-ml-py not installed)"


async def test_nvml_error_mid_read_is_an_error_string(install: Any) -> None:
    nv = install(fake_pynvml())

    def boom() -> int:
        raise NVMLError("GPU is lost")

    nv.nvmlDeviceGetCount = boom
    assert await NvmlBackend().read() == ((), "NVML: GPU is lost")


def _labels(gpu: int) -> str:
    return (
        f'gpu="{gpu}",UUID="GPU-{gpu}",device="nvidia{gpu}",'
        'modelName="NVIDIA A100-SXM4-80GB",Hostname="node1"'
    )


DCGM_TEXT = (
    "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
    "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
    + "".join(
        f"{name}{{{_labels(gpu)}}} {value}\n"
        for gpu, name, value in [
            (0, "DCGM_FI_DEV_SM_CLOCK", 1410),
            (1, "DCGM_FI_DEV_SM_CLOCK", 1410),
            (0, "DCGM_FI_DEV_GPU_TEMP", 64),
            (0, "DCGM_FI_DEV_POWER_USAGE", 301.5),
            (0, "DCGM_FI_DEV_GPU_UTIL", 88),
            (0, "DCGM_FI_DEV_MEM_COPY_UTIL", 40),
            (0, "DCGM_FI_DEV_FB_USED", 72000),
            (0, "DCGM_FI_DEV_FB_FREE", 9000),
            (0, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 4),
        ]
    )
    + "go_goroutines 17\n"
)


def test_parse_dcgm_exporter_text() -> None:
    gpus = parse_dcgm(promtext.parse(DCGM_TEXT, DCGM_KEEP))
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[0]
    assert g.source == "dcgm"
    assert g.name == "NVIDIA A100-SXM4-80GB @ node1"
    assert (g.util_frac, g.mem_bw_util_frac) == (0.88, 0.40)
    assert g.mem_used_bytes == 72000 * 2**20
    assert g.mem_total_bytes == 81000 * 2**20
    assert (g.power_w, g.temp_c, g.sm_clock_mhz) == (301.5, 64.0, 1410.0)
    assert g.throttle_reasons == ("sw_power_cap",)
    assert gpus[1].temp_c is None  # not exported for that GPU: unknown


async def test_dcgm_backend_over_http_and_its_errors() -> None:
    ok = httpx.MockTransport(lambda r: httpx.Response(200, text=DCGM_TEXT))
    async with httpx.AsyncClient(transport=ok) as c:
        gpus, error = await DcgmBackend("http://n:9400/metrics", client=c).read()
    assert error is None
    assert len(gpus) == 2
    empty = httpx.MockTransport(lambda r: httpx.Response(200, text="go_goroutines 3\n"))
    async with httpx.AsyncClient(transport=empty) as c:
        assert await DcgmBackend("http://n:9400/metrics", client=c).read() == (
            (),
            "dcgm-exporter at http://n:9400/metrics exports no GPU",
        )
    down = httpx.MockTransport(lambda r: httpx.Response(503, text="no"))
    async with httpx.AsyncClient(transport=down) as c:
        _, error = await DcgmBackend("http://n:9400/metrics", client=c).read()
    assert error == "dcgm-exporter: HTTP 503 from http://n:9400/metrics"


async def test_fake_and_combined_backends() -> None:
    g = GpuStats(index=0, name="fake")
    fake = FakeGpuBackend([((g,), None)])
    absent = FakeGpuBackend([((), "no NVIDIA GPU visible")])
    assert await CombinedGpuBackend([absent, fake]).read() == ((g,), None)
    broken = FakeGpuBackend([RuntimeError("boom")])
    gpus, error = await CombinedGpuBackend([broken, absent]).read()
    assert gpus == ()
    assert error == "GPU backend failed: boom; no NVIDIA GPU visible"
