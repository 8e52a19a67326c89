"""The history's poll, without sockets: the limit changes it keeps are those since its last
poll (with who), the replicas' moves are stamped in wall time, and the file is named per port."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from llmtop.gateway.server.app import create_app
from llmtop.gateway.server.history_loop import HistoryPoller, history_path, keeper_of
from llmtop.settings import GatewaySettings

UPSTREAMS = "http://127.0.0.1:9,http://127.0.0.1:10"


def poller() -> tuple[Any, HistoryPoller]:
    app: Any = create_app(GatewaySettings(upstream=UPSTREAMS))
    state = app.state.gateway
    return state, HistoryPoller(state, "http://127.0.0.1:9000")


def test_limit_changes_are_kept_once_with_who() -> None:
    state, p = poller()
    state.admission.set_limits({"max_concurrency": 3}, source="dave")
    (event,) = p._new_events()
    assert (event["field"], event["new"], event["source"]) == ("max_concurrency", 3, "dave")
    assert p._new_events() == ()
    state.admission.set_limits({"max_queue": 5}, source="erin")
    assert [e["source"] for e in p._new_events()] == ["erin"]


def test_replica_moves_are_stamped_in_wall_time() -> None:
    state, p = poller()
    bal = state.balancer
    bal.fail(bal.replicas[1], "connection refused")
    wall = time.time()
    (move,) = p._replica_moves(wall)
    assert move["url"] == "http://127.0.0.1:10"
    assert move["change"] == "out"
    assert move["reason"] == "connection refused"
    assert wall - 1.0 < move["time"] <= wall
    assert p._replica_moves(wall) == []


def test_one_file_per_port_under_the_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert history_path(GatewaySettings(listen="0.0.0.0:9100")) == (
        tmp_path / "llmtop" / "gateway-9100.sqlite"
    )
    mine = GatewaySettings(listen="127.0.0.1:9000", history_dir=str(tmp_path / "h"))
    assert history_path(mine) == tmp_path / "h" / "gateway-9000.sqlite"
    off = keeper_of(GatewaySettings(history=False), token=None)
    assert off.status()["on"] is False
    assert off.status()["why_off"] == "turned off (--no-history)"


async def test_the_endpoint_needs_the_token_and_answers_a_recording(tmp_path: Path) -> None:
    import dataclasses

    import httpx

    from llmtop.core.record.decode import read_recording_bytes
    from tests.support.history import T0, poll

    settings = GatewaySettings(upstream=UPSTREAMS, admin_token="s3cret")
    keeper = keeper_of(GatewaySettings(history_dir=str(tmp_path)), token="s3cret")
    keeper.clock = lambda: T0 + 11
    for i in range(10):
        keeper.put(poll(i))
    keeper.flush()
    leak = dataclasses.replace(poll(10), gateway={"upstream": {"last_error": "bad key s3cret"}})
    keeper.put(leak)
    keeper.flush()
    app = create_app(settings, history=keeper)
    auth = {"authorization": "Bearer s3cret"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        assert (await c.get("/admin/history?since=1h")).status_code == 401
        bad = await c.get("/admin/history?since=soon", headers=auth)
        raw = await c.get(
            f"/admin/history?since={T0 + 4:.3f}", headers={**auth, "accept-encoding": "identity"}
        )
        zipped = await c.get("/admin/history?since=1h", headers={**auth, "accept-encoding": "gzip"})
    keeper.close()
    assert bad.status_code == 400
    assert "since='soon'" in bad.json()["error"]["message"]
    served = list(read_recording_bytes(raw.content))
    assert served[:-1] == [poll(i) for i in range(4, 10)]
    assert served[-1].gateway == {"upstream": {"last_error": "bad key [redacted]"}}
    assert zipped.headers["content-encoding"] == "gzip"
    assert len(read_recording_bytes(zipped.content)) == 11
    assert b"s3cret" not in raw.content  # the admin token is redacted from every line


async def test_no_history_is_a_503_that_says_why() -> None:
    import httpx

    app = create_app(GatewaySettings(upstream=UPSTREAMS))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        r = await c.get("/admin/history?since=1h")
    assert r.status_code == 503
    assert "keeps no history" in r.json()["error"]["message"]


def test_a_bound_that_keeps_nothing_is_one_config_line() -> None:
    from llmtop.errors import ConfigError

    with pytest.raises(ConfigError, match="must be more than 0"):
        keeper_of(GatewaySettings(history_max_mb=0), token=None)
