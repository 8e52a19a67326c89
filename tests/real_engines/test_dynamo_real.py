"""llmtop against a real NVIDIA Dynamo frontend (ai-dynamo 1.4.2) in front of its mock engine
(`scripts/real-dynamo`: 4 sequences, 64 KV blocks of 16 tokens): `snapshot` of the fresh
frontend (its request families not yet exported) raises nothing, and under 16 streamed requests
its `dynamo_frontend_*` families read as the queue, the KV capacity and the latency quantiles.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.real_engines import ALARMS, Burst, findings, healthy, report, served, snapshot

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real-dynamo"


def _up(url: str) -> bool:
    try:
        return '"id"' in httpx.get(url + "/v1/models", timeout=3.0).text
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def dynamo_url() -> Iterator[str]:
    """A Dynamo frontend listing the mock model: given, already running, or served here (and
    stopped at the end). Served here it is fresh: no request has reached it yet."""
    given = os.environ.get("LLMTOP_REAL_DYNAMO_URL")
    if given:
        yield given.rstrip("/")
        return
    with served(SCRIPT, _up, 200) as url:
        yield url


def alarms(js: dict[str, Any]) -> list[str]:
    return [f["id"] for f in findings(js) if f["severity"] in ALARMS]


def test_dynamo_idle_then_under_load(dynamo_url: str) -> None:
    assert healthy(dynamo_url) or _up(dynamo_url)
    code, idle = snapshot(dynamo_url, 2.0)
    (engine,) = idle["engines"]
    assert engine["engine"]["kind"] == "dynamo"
    assert alarms(idle) == []  # a frontend no request reached yet is no blind engine
    assert engine["kv_capacity_tokens"] == 64 * 16  # model_total_kv_blocks x block size
    model = httpx.get(dynamo_url + "/v1/models", timeout=5.0).json()["data"][0]["id"]

    burst = Burst(dynamo_url, "/v1/completions", 200, model, ignore_eos=False)
    burst.start(16, budget_s=120.0)
    load_code, load = snapshot(dynamo_url, 8.0)
    burst.join()
    (e,) = load["engines"]
    assert e["engine"]["kind"] == "dynamo"
    assert burst.errors == []
    assert (e["running"] or 0) + (e["waiting"] or 0) > 0
    assert e["ttft_p95_s"] is not None
    report(
        "dynamo",
        {
            "idle_status": idle["status"],
            "idle_exit": code,
            "load_status": load["status"],
            "load_exit": load_code,
            "running": e["running"],
            "waiting": e["waiting"],
            "kv_capacity_tokens": e["kv_capacity_tokens"],
            "ttft_p95_s": e["ttft_p95_s"],
            "findings": [f"{f['id']} {f['severity']}" for f in load["findings"]],
            "client_ttft_p95_s": round(burst.p95(), 2),
        },
    )
