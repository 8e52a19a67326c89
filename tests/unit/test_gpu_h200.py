"""The GPU rules and figures on what llmtop's NVML path read from a real H200 (scripts/gpu-check on
a lent GPU machine: 3 s idle, 20 s of a bf16 matmul loop holding 40 GiB, 3 s after). The default
suite has no GPU; this keeps the rules honest against a real driver's numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmtop.core.base.snapshot import GpuStats
from tests.support.health import healthy, ids, run

SAMPLES = Path(__file__).parents[1] / "fixtures" / "nvml-h200-samples.json"


def phases() -> dict[str, list[GpuStats]]:
    out: dict[str, list[GpuStats]] = {}
    for row in json.loads(SAMPLES.read_text()):
        for g in row["gpus"]:
            fields: dict[str, Any] = dict(g)
            fields["throttle_reasons"] = tuple(fields["throttle_reasons"])
            fields["processes"] = tuple(fields["processes"])
            out.setdefault(row["phase"], []).append(GpuStats(**fields))
    return out


def test_the_readings_are_a_real_h200_idle_then_loaded() -> None:
    p = phases()
    assert {g.name for gs in p.values() for g in gs} == {"NVIDIA H200"}
    assert all(g.util_frac == 0.0 and g.processes == () for g in p["idle"])
    assert all((g.util_frac or 0) >= 0.99 for g in p["load"])
    assert all(g.mem_used_bytes and g.mem_used_bytes > 40 * 2**30 for g in p["load"])
    assert all(g.power_w and g.power_limit_w == 700.0 for g in p["load"])


def test_gpu_throttled_fires_at_the_power_cap_under_load_and_not_idle() -> None:
    p = phases()
    idle = run([(healthy(), None, (g,)) for g in p["idle"]])
    assert not any("gpu-throttled" in ids(f) for f in idle)
    loaded = run([(healthy(), None, (g,)) for g in p["load"]])
    fired = [f for fs in loaded for f in fs if f.id == "gpu-throttled"]
    assert fired, "a GPU held at its 700 W cap (sw_power_cap) must be named"
    last = fired[-1]
    assert "sw_power_cap" in last.summary
    assert "700 W" in last.summary
    assert "power limit" in last.action
