"""The gateway's replica findings end to end: a real `llmtop sim` behind an in-process gateway
whose second replica refuses every connection, read by `llmtop snapshot --json` as a cron job
would: the gateway ejects the dead replica on its own /health check, /admin/stats says so, and
the snapshot names it with its address and its error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.terminal import Server, clean_env, get_json, wait_until
from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main
from llmtop.serve.stack import free_port


@pytest.mark.slow(10)
def test_snapshot_json_names_the_replica_out_of_the_gateways_rotation(
    tmp_path: Path,
    serve_app: Callable[[Any], ServerThread],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings

    sim = Server(["sim", "--profile", "fast", "--port", "0"], clean_env(tmp_path), tmp_path / "s")
    try:
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: refused
        gw = serve_app(create_app(GatewaySettings(upstream=f"{sim.url},{dead}", eject_s=30.0)))

        def out_now() -> bool:
            reps = get_json(gw.url + "/admin/stats")["replicas"]
            return any(r["url"] == dead and r["state"] != "ok" for r in reps)

        wait_until(out_now, "the gateway took the dead replica out of rotation", 15)
        capsys.readouterr()
        args = ["snapshot", "--vllm", sim.url, "--gateway", gw.url, "--json"]
        code = main([*args, "--window-s", "1", "--interval-s", "0.5"])
        doc = json.loads(capsys.readouterr().out)
    finally:
        sim.stop()
    found = {f["id"]: f for f in doc["findings"]}
    assert "replica-out-of-rotation" in found, sorted(found)
    f = found["replica-out-of-rotation"]
    assert f["severity"] == "warning"  # the live one still takes requests
    assert dead.split("//")[1] in f["summary"]
    assert "unreachable" in f["summary"]
    assert "1 in rotation" in f["action"]
    assert code == 1  # degraded: the verdict follows the finding
