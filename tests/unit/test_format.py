"""format and summary: units for people, n/a for unknown, the snapshot JSON contract."""

from __future__ import annotations

import json
import math

import pytest

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, GpuStats, Snapshot
from llmtop.core.base.window import WindowFinding, WindowSnapshot
from llmtop.core.output.summary import EXIT_CODES, to_json, to_text


@pytest.mark.parametrize(
    "fn",
    [
        fmt.seconds,
        fmt.tok_per_s,
        fmt.per_s,
        fmt.frac,
        fmt.count,
        fmt.gib,
        fmt.watts,
        fmt.celsius,
        fmt.mhz,
    ],
)
def test_unknown_is_na_never_zero(fn: object) -> None:
    assert fn(None) == "n/a"  # type: ignore[operator]


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0057, "5.7 ms"), (0.85, "850 ms"), (3.24, "3.2 s"), (65.0, "1 m 05 s"), (0.0, "0.0 ms")],
)
def test_seconds(value: float, text: str) -> None:
    assert fmt.seconds(value) == text


def test_other_units() -> None:
    assert fmt.tok_per_s(1041.4) == "1,041 tok/s"
    assert fmt.tok_per_s(8.46) == "8.5 tok/s"
    assert fmt.per_s(0.8) == "0.8/s"
    assert fmt.per_s(2.0, " preemptions/s") == "2.0 preemptions/s"
    assert fmt.frac(0.934) == "93%"
    assert fmt.count(38_800) == "38,800"
    assert fmt.gib(14 * 2**30) == "14.0 GiB"
    assert (fmt.watts(287.4), fmt.celsius(71.2), fmt.mhz(1410)) == ("287 W", "71 °C", "1,410 MHz")


def _snap() -> WindowSnapshot:
    engine = EngineStats(
        url="http://e",
        up=True,
        model="m",
        version="0.32.0",
        running=4,
        waiting=42,
        waiting_capacity=42,
        kv_cache_usage_frac=1.0,
        kv_capacity_tokens=4096,
        decode_tok_per_s=70.6,
        ttft_p95_s=math.inf,
    )
    finding = Finding("kv-exhausted", "critical", "kv", "KV full", "cap concurrency at ~3")
    last = Snapshot(
        time=1_796_000_000.0,
        engines=(engine, EngineStats(url="http://down", up=False, error="connection refused")),
        gateway=GatewayStats(url="http://gw", up=True, in_flight=8, max_concurrency=8, queued=3),
        gpus=(GpuStats(index=0, name="H100", temp_c=70, throttle_reasons=("sw_power_cap",)),),
        findings=(finding,),
        status="critical",
    )
    return WindowSnapshot(
        last=last,
        start=last.time - 5.0,
        polls=6,
        interval_s=1.0,
        findings=(WindowFinding(finding, first_s=3.0, last_s=5.0, held_polls=3),),
    )


def test_json_is_strict_and_complete() -> None:
    data = to_json(_snap())
    text = json.dumps(data, allow_nan=False)  # inf became null
    assert json.loads(text)["engines"][0]["ttft_p95_s"] is None
    assert data["time"] == "2026-11-30T00:53:20Z"
    assert data["engines"][1] == {
        **dict.fromkeys(data["engines"][1], None),
        "url": "http://down",
        "up": False,
        "error": "connection refused",
    }
    assert data["gateway"]["in_flight"] == 8
    assert data["gpus"][0]["throttle_reasons"] == ["sw_power_cap"]
    assert data["findings"] == [
        {
            "id": "kv-exhausted",
            "severity": "critical",
            "bottleneck": "kv",
            "summary": "KV full",
            "action": "cap concurrency at ~3",
            "first_s": 3.0,
            "last_s": 5.0,
            "held_polls": 3,
        }
    ]
    assert data["earlier_findings"] == []
    assert data["window"]["span_s"] == 5.0


def test_text_summary() -> None:
    text = to_text(_snap())
    assert "status CRITICAL" in text
    assert "m (vLLM 0.32.0)" in text
    assert "waiting 42 (42 for capacity)" in text
    assert "DOWN: connection refused" in text
    assert "in flight 8/8" in text
    assert "throttled: sw_power_cap" in text
    assert "CRITICAL kv-exhausted [kv] KV full" in text
    assert "-> cap concurrency at ~3" in text
    assert "held from +3.0 s to +5.0 s (3 of 6 polls)" in text


def test_exit_codes() -> None:
    assert EXIT_CODES == {"ok": 0, "degraded": 1, "critical": 2, "unknown": 3}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_is_na(value: float) -> None:
    assert fmt.seconds(value) == "n/a"
    assert fmt.tok_per_s(value) == "n/a"
    assert fmt.frac(value) == "n/a"
