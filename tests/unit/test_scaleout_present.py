"""The gateway's /admin/stats past one engine and one process -> GatewayStats -> the panel title."""

from __future__ import annotations

from llmtop.core.derive.series import CounterWindow
from llmtop.core.pipeline.pipeline import gateway_stats
from llmtop.tui.view.present import scaleout_text

STATS = {
    "in_flight": 5,
    "queued": 0,
    "limits": {"max_concurrency": 8, "max_queue": 10, "queue_timeout_s": 5.0, "mode": "manual"},
    "replicas": [
        {"url": "http://127.0.0.1:8001", "state": "ok", "in_flight": 3, "share": 0.6},
        {"url": "http://127.0.0.1:8002", "state": "ejected", "in_flight": 0, "share": 0.4},
        "not a replica",
    ],
    "shared": {"backend": "redis", "status": "ok", "live_gateways": 3, "global_in_flight": 7},
}


def test_replicas_and_shared_limits_reach_the_title() -> None:
    g = gateway_stats("http://gw", STATS, 1.0, CounterWindow(), 10.0)
    assert [(r.in_flight, r.ok) for r in g.replicas] == [(3, True), (0, False)]
    assert g.shared_status == "ok"
    assert scaleout_text(g) == "3|0x redis 7/8×3"


def test_fallback_is_said_and_a_plain_gateway_adds_nothing() -> None:
    doc = {**STATS, "shared": {"backend": "redis", "status": "fallback", "live_gateways": 3}}
    assert scaleout_text(gateway_stats("u", doc, 1.0, CounterWindow(), 10.0)).endswith(
        "REDIS FALLBACK"
    )
    plain = {
        "limits": STATS["limits"],
        "replicas": [{"url": "u", "state": "ok", "in_flight": 1}],
        "shared": {"backend": "local", "status": "ok"},
    }
    assert scaleout_text(gateway_stats("u", plain, 1.0, CounterWindow(), 10.0)) == ""
