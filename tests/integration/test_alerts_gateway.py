"""The gateway's replica and peer findings as alerts (core/alerts/gateway.py), judged by
`promtool test rules` on the gateway's own series: a replica out of rotation and shortly
after, Redis away, a peer gone, a Redis restart (the peers registering again) that is not a
peer lost, and a peer draining (info) while it finishes what it holds."""

from __future__ import annotations

from pathlib import Path

from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.output.rulesfile import render
from tests.support import alert_replay as ar
from tests.support.promtool import promtool

GW = 'instance="gw:9000"'


def _alert(
    name: str, finding: str, bottleneck: str, severity: str = "warning", **labels: str
) -> dict[str, str | float]:
    extra = "".join(f',{k}="{v}"' for k, v in sorted(labels.items()))
    return {
        "labels": (
            f'{{__name__="ALERTS",alertname="{name}",alertstate="firing",'
            f'bottleneck="{bottleneck}",finding="{finding}",{GW}{extra},severity="{severity}"}}'
        ),
        "value": 1.0,
    }


def _firing(alertname: str) -> str:
    return f'ALERTS{{alertstate="firing",alertname="{alertname}"}}'


def test_replica_redis_and_peer_alerts_fire_where_llmtop_names_them(tmp_path: Path) -> None:
    rep = f'llmtop_gateway_replica_healthy{{{GW},replica="http://127.0.0.1:8001"}}'
    rows = [
        (rep, "1x29 0x4 1x40"),  # out of rotation 29-33 s
        (f"llmtop_gateway_shared_fallback{{{GW}}}", "0x39 1x4 0x30"),  # Redis away 40-43 s
        # back at 44 s the peers register again (1 at the first sync), a peer gone at 60 s
        (f"llmtop_gateway_shared_live_gateways{{{GW}}}", "2x43 1 2x15 1x14"),
        # a peer draining 50-52 s (the series absent while Redis is away, as the gateway does)
        (f"llmtop_gateway_shared_draining_gateways{{{GW}}}", "0x39 _x4 0x5 1x2 0x22"),
        (f"up{{{GW}}}", "1x74"),
    ]
    rules = tmp_path / "rules.yml"
    rules.write_text(render(AlertSpec(interval_s=1.0)))
    out = _alert(
        "LlmtopReplicaOutOfRotation",
        "replica-out-of-rotation",
        "target",
        replica="http://127.0.0.1:8001",
    )
    lost = _alert("LlmtopGatewaySharedLimitsLost", "gateway-shared-limits-lost", "gateway")
    peer = _alert("LlmtopGatewayPeerLost", "gateway-peer-lost", "gateway")
    draining = _alert("LlmtopGatewayPeerDraining", "gateway-peer-draining", "gateway", "info")
    tests = [
        {"expr": _firing("LlmtopReplicaOutOfRotation"), "eval_time": "28s", "exp_samples": []},
        {"expr": _firing("LlmtopReplicaOutOfRotation"), "eval_time": "30s", "exp_samples": [out]},
        # back in at 34 s: still named for replica_recent_out_s (10 s) after it last left
        {"expr": _firing("LlmtopReplicaOutOfRotation"), "eval_time": "40s", "exp_samples": [out]},
        {"expr": _firing("LlmtopReplicaOutOfRotation"), "eval_time": "46s", "exp_samples": []},
        {
            "expr": _firing("LlmtopGatewaySharedLimitsLost"),
            "eval_time": "41s",
            "exp_samples": [lost],
        },
        {"expr": _firing("LlmtopGatewaySharedLimitsLost"), "eval_time": "45s", "exp_samples": []},
        # the count of 1 right after Redis came back is not a peer lost
        {"expr": _firing("LlmtopGatewayPeerLost"), "eval_time": "44s", "exp_samples": []},
        {"expr": _firing("LlmtopGatewayPeerLost"), "eval_time": "61s", "exp_samples": [peer]},
        {"expr": _firing("LlmtopGatewayPeerDraining"), "eval_time": "49s", "exp_samples": []},
        {
            "expr": _firing("LlmtopGatewayPeerDraining"),
            "eval_time": "50s",
            "exp_samples": [draining],
        },
        {"expr": _firing("LlmtopGatewayPeerDraining"), "eval_time": "53s", "exp_samples": []},
    ]
    series = [{"series": s, "values": v} for s, v in rows]
    test_file = ar.write_assertions(rules, series, tests, tmp_path / "gateway.test.json")
    done = ar.run_promtool(promtool(), test_file)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
