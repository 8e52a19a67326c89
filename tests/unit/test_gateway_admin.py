"""Admin API, 429 bodies, metrics text and small pure pieces, in-process (httpx.ASGITransport)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmtop.errors import ConfigError, UsageError
from llmtop.gateway.admission.prompt import prompt_tokens
from llmtop.gateway.server.app import create_app
from llmtop.gateway.server.serve import check_exposure, is_loopback
from llmtop.settings import GatewaySettings
from tests.support.promtool import check_metrics

TOKEN = "s3cret-token-value"


def client(**overrides: Any) -> httpx.AsyncClient:
    app = create_app(GatewaySettings(upstream="http://127.0.0.1:9", **overrides))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


async def test_get_limits_shape() -> None:
    async with client(max_concurrency=3, rate_limit_rpm=120.0) as c:
        r = await c.get("/admin/limits")
    assert r.status_code == 200
    assert r.json() == {
        "max_concurrency": 3,
        "max_queue": 128,
        "queue_timeout_s": 30.0,
        "rate_limit_rpm": 120.0,
        "max_inflight_prompt_tokens": None,
        "max_inflight_kv_blocks": None,
        "max_unprefilled_prompt_tokens": None,
        "ttft_slo_s": 2.0,  # the SLO ([slo] ttft_s): admission's budget until overridden
        "queue_policy": "fifo",
        "mode": "manual",
    }


async def test_patch_limits_returns_all_and_records_events() -> None:
    async with client() as c:
        r = await c.patch(
            "/admin/limits",
            json={"max_concurrency": 4, "max_inflight_prompt_tokens": 9000},
            headers={"x-llmtop-source": "tui"},
        )
        assert r.status_code == 200
        assert r.json()["max_concurrency"] == 4
        assert r.json()["max_inflight_prompt_tokens"] == 9000
        assert r.json()["max_queue"] == 128
        await c.patch("/admin/limits", json={"max_inflight_prompt_tokens": None})
        events = (await c.get("/admin/events")).json()["events"]
    assert [(e["field"], e["old"], e["new"], e["source"]) for e in events] == [
        ("max_concurrency", 8, 4, "tui"),
        ("max_inflight_prompt_tokens", None, 9000, "tui"),
        ("max_inflight_prompt_tokens", 9000, None, "admin"),
    ]
    assert all(isinstance(e["time"], float) for e in events)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_concurrency": "x"}, "max_concurrency"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"queue_timeout_s": -1}, "queue_timeout_s"),
        ({"rate_limit_rpm": "fast"}, "rate_limit_rpm"),
        ({"nope": 1}, "nope"),
    ],
)
async def test_patch_limits_400_names_the_field(body: dict[str, Any], field: str) -> None:
    async with client() as c:
        r = await c.patch("/admin/limits", json=body)
        after = (await c.get("/admin/limits")).json()
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["field"] == field
    assert err["type"] == "invalid_request_error"
    assert field in err["message"]
    assert after["max_concurrency"] == 8


async def test_patch_limits_bad_json() -> None:
    async with client() as c:
        r = await c.patch("/admin/limits", content=b"{not json")
        r2 = await c.patch("/admin/limits", json=[1, 2])
    assert r.status_code == 400
    assert r2.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


async def test_pause_resume_and_stats_shape() -> None:
    async with client() as c:
        assert (await c.post("/admin/pause")).json() == {"paused": True}
        stats = (await c.get("/admin/stats")).json()
        assert (await c.post("/admin/resume")).json() == {"paused": False}
        events = (await c.get("/admin/events")).json()["events"]
    assert stats["paused"] is True
    assert set(stats) >= {
        "time", "in_flight", "queued", "queued_by_priority", "in_flight_prompt_tokens",
        "offered", "outcomes", "rejections", "queue_wait_s", "ttft_s", "window_s", "paused",
        "upstream", "limits",
    }  # fmt: skip
    assert set(stats["outcomes"]) == {
        "completed", "rejected", "timed_out", "cancelled", "upstream_error",
    }  # fmt: skip
    assert set(stats["rejections"]) >= {"queue_full", "displaced", "shed", "rate_limited"}
    assert stats["upstream"] == {"url": "http://127.0.0.1:9", "healthy": None, "last_error": None}
    assert stats["queue_wait_s"] == {"p50": None, "p95": None}
    assert [e["field"] for e in events] == ["paused", "paused"]


async def test_admin_token_required_and_never_echoed() -> None:
    async with client(admin_token=TOKEN) as c:
        r = await c.get("/admin/limits")
        wrong = await c.get("/admin/stats", headers={"authorization": "Bearer nope"})
        ok = await c.patch(
            "/admin/limits",
            json={"max_queue": 5},
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        events = await c.get("/admin/events", headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 401
    assert wrong.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json() == {
        "error": {"message": "admin token required", "type": "authentication_error"}
    }
    assert ok.status_code == 200
    for resp in (r, wrong, ok, events):
        assert TOKEN not in resp.text
        assert TOKEN not in str(resp.headers)


async def test_token_file(tmp_path: Any) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    async with client(admin_token_file=str(f)) as c:
        assert (await c.get("/admin/limits")).status_code == 401
        r = await c.get("/admin/limits", headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200


async def test_queue_full_429_body_and_retry_after() -> None:
    async with client(max_queue=0) as c:
        await c.post("/admin/pause")
        r = await c.post("/v1/completions", json={"prompt": "hi"})
        stats = (await c.get("/admin/stats")).json()
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) >= 1
    err = r.json()["error"]
    assert err["message"] == "queue full: 0/0 waiting (max_queue)"
    assert err["reason"] == "queue_full"
    assert err["code"] == 429
    assert stats["rejections"]["queue_full"] == 1
    assert stats["offered"] == 1


async def test_bad_priority_and_large_body() -> None:
    async with client(max_body_bytes=100) as c:
        bad = await c.post(
            "/v1/completions", json={"prompt": "x"}, headers={"x-llmtop-priority": "urgent"}
        )
        big = await c.post("/v1/completions", content=b"x" * 101)
    assert bad.status_code == 400
    assert "x-llmtop-priority" in bad.json()["error"]["message"]
    assert big.status_code == 413
    assert "max_body_bytes" in big.json()["error"]["message"]


async def test_metrics_text_parses_with_llmtop_gateway_names() -> None:
    async with client(max_queue=0, rate_limit_rpm=60.0) as c:
        await c.post("/admin/pause")
        await c.post("/v1/completions", json={"prompt": "hi"})
        r = await c.get("/metrics")
        healthz = await c.get("/healthz")
    assert r.status_code == 200
    assert healthz.json()["status"] == "ok"
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert all(name.startswith("llmtop_gateway_") for name in families)
    assert families["llmtop_gateway_paused"].samples[0].value == 1.0
    rej = {
        s.labels["reason"]: s.value
        for s in families["llmtop_gateway_rejections"].samples
        if s.name == "llmtop_gateway_rejections_total"
    }
    assert rej["queue_full"] == 1.0
    assert families["llmtop_gateway_queue_wait_seconds"].type == "histogram"
    assert families["llmtop_gateway_limit_rate_limit_rpm"].samples[0].value == 60.0
    for f in families.values():
        assert f.documentation
        if f.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in f.samples)


async def test_metrics_pass_promtool() -> None:
    async with client(rate_limit_rpm=60.0, max_inflight_prompt_tokens=1000) as c:
        await c.post("/admin/pause")
        text = (await c.get("/metrics")).text
    assert "llmtop_gateway_handler_seconds_bucket" in text
    assert "llmtop_gateway_priority_clamped_total" in text
    check_metrics(text)  # promtool reads stdin; a short synchronous call is fine here


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_concurrency"):
        create_app(GatewaySettings(max_concurrency=0))


def test_prompt_token_estimates() -> None:
    assert prompt_tokens(b'{"prompt": [1, 2, 3, 4]}') == 4
    assert prompt_tokens(b'{"prompt": [[1, 2], [3]]}') == 3
    assert prompt_tokens(b'{"prompt": "' + b"a" * 400 + b'"}') == 100
    chat = b'{"messages": [{"role": "user", "content": "' + b"b" * 80 + b'"}]}'
    assert prompt_tokens(chat) == 20
    parts = b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]}]}'
    assert prompt_tokens(parts) == 2
    assert prompt_tokens(b"not json") == 0


def test_exposure_needs_a_token_off_loopback() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    check_exposure("127.0.0.1", None)
    check_exposure("0.0.0.0", "t")
    with pytest.raises(UsageError, match="admin token"):
        check_exposure("0.0.0.0", None)
