"""A replica that stops answering (SIGSTOP: a hang, not a refusal) is taken out of rotation
within the balancer's own deadline and put back once it answers (SIGCONT), each an event and a
log line; meanwhile the other replica takes every new request. Real `llmtop sim` processes
(a process can be stopped; a thread cannot), the gateway in-process so its balancer is read
directly.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.terminal import Server, clean_env, wait_until
from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.gateway.server.replica_watch import CHECK_EVERY_S
from llmtop.gateway.upstreams.balancer import Balancer

DEADLINE_S = 1.0
BODY = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 4}


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[Server]]:
    env = clean_env(tmp_path)
    made = [
        Server(["sim", "--profile", "fast", "--port", "0"], env, tmp_path / f"sim{i}.log")
        for i in range(2)
    ]
    yield made
    for s in made:
        with_cont(s)
        s.stop()


def with_cont(s: Server) -> None:
    if s.proc.poll() is None:
        os.kill(s.proc.pid, signal.SIGCONT)


@pytest.mark.slow(8)
def test_a_hung_replica_is_out_within_the_deadline_and_back_when_it_answers(
    sims: list[Server], serve_app: Callable[[Any], ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings

    hung, other = sims
    settings = GatewaySettings(
        upstream=f"{hung.url},{other.url}", eject_s=0.5, replica_deadline_s=DEADLINE_S
    )
    app = create_app(settings)
    bal: Balancer = app.state.gateway.balancer
    gw = serve_app(app)
    caplog.set_level(logging.INFO, logger="llmtop.gateway")
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        assert all(c.post("/v1/completions", json=BODY).status_code == 200 for _ in range(4))
        os.kill(hung.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        out = wait_until(
            lambda: next((e for e in list(bal.events) if e.change == "out"), None),
            "the hung replica is out of rotation",
            15,
        )
        assert out.url == hung.url
        assert "no /health answer within 1 s (hung)" in (out.reason or "")
        # the deadline, plus one check's interval, plus a loaded box's wake-up
        assert out.time - stopped <= DEADLINE_S + CHECK_EVERY_S + 0.5
        sent_before = next(r.sent for r in bal.replicas if r.url == hung.url)
        answers = [c.post("/v1/completions", json=BODY).status_code for _ in range(6)]
        assert answers == [200] * 6
        assert next(r.sent for r in bal.replicas if r.url == hung.url) == sent_before
        os.kill(hung.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        back = wait_until(
            lambda: next((e for e in list(bal.events) if e.change == "back"), None),
            "the replica is back once it answers",
            15,
        )
        assert back.url == hung.url
        assert back.time >= resumed
        assert [e.change for e in bal.events] == ["out", "back"]
        # back in rotation: it takes requests again
        wait_until(
            lambda: (
                c.post("/v1/completions", json=BODY).status_code == 200
                and next(r.sent for r in bal.replicas if r.url == hung.url) > sent_before
            ),
            "the replica takes traffic again",
            15,
        )

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "rotation" in r.getMessage()]

    wait_until(lambda: len(lines()) >= 2, "both logged (on the watcher's next tick)", 5)
    assert lines() == [
        f"llmtop gateway: replica {hung.url} out of rotation: {out.reason}",
        f"llmtop gateway: replica {hung.url} back in rotation",
    ]
