"""The gateway's history over real sockets: `llmtop sim` and `llmtop gateway` as processes, a
little load, a limit changed with its `who`; /admin/history read as a recording carries the
engine's samples, the gateway's stats and the change, and survives the gateway's restart on
the same folder; an unwritable folder leaves the gateway serving and says why."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from llmtop.core.record.decode import Recording
from llmtop.serve.stack import free_port
from llmtop.sources.history import gateway_history
from tests.support.gateway_queue import wait_ready

pytestmark = [pytest.mark.slow(12), pytest.mark.timeout(90)]
LLMTOP = [sys.executable, "-m", "llmtop"]
ENV = {**os.environ, "LLMTOP_HISTORY": "true"}  # tests/conftest.py turns it off elsewhere


@contextmanager
def process(args: list[str], log: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen([*LLMTOP, *args], stdout=out, stderr=out, env=ENV)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    """One `llmtop sim` for the module's gateways."""
    port = free_port()
    with process(["sim", "--port", str(port), "--profile", "fast"]):
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + "/health")
        yield url


@contextmanager
def gateway(sim_url: str, port: int, *args: str, log: Path | None = None) -> Iterator[str]:
    listen = f"127.0.0.1:{port}"
    quick = ["--drain-grace-s", "0", "--drain-timeout-s", "1"]  # SIGTERM: gone at once
    with process(["gateway", "--vllm", sim_url, "--listen", listen, *quick, *args], log):
        url = f"http://{listen}"
        wait_ready(url + "/healthz")
        yield url


async def load(url: str, n: int) -> None:
    """`n` short completions through the gateway, 4 at a time."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 16}
        for i in range(0, n, 4):
            answers = await asyncio.gather(
                *(c.post("/v1/completions", json=body) for _ in range(min(4, n - i)))
            )
            assert [a.status_code for a in answers] == [200] * len(answers)


def changed(rec: Recording) -> bool:
    return any(p.events for p in rec)


async def until_polled(url: str, done: Callable[[Recording], bool]) -> Recording:
    """The gateway's last minutes once `done` holds of them (polled, bounded)."""
    for _ in range(50):
        rec = await gateway_history(url, None, 120)
        if len(rec) and done(rec):
            return rec
        await asyncio.sleep(0.2)
    raise AssertionError(f"history never got there: {len(rec)} polls")


async def test_history_carries_the_engine_the_gateway_and_who_changed_a_limit(
    tmp_path: Path, engine: str
) -> None:
    folder = tmp_path / "state"
    port = free_port()
    with gateway(engine, port, "--history-dir", str(folder)) as gw:
        await load(gw, 12)
        async with httpx.AsyncClient(base_url=gw) as c:
            r = await c.patch(
                "/admin/limits",
                json={"max_concurrency": 3},
                headers={"x-llmtop-source": "carol"},
            )
            assert r.status_code == 200
            rec = await until_polled(gw, lambda rec: changed(rec) and len(rec) >= 3)
            stats = (await c.get("/admin/stats")).json()["history"]
            gzipped = await c.get("/admin/history?since=1m")
    assert stats["on"] is True
    assert stats["path"] == str(folder / f"gateway-{port}.sqlite")
    assert stats["why_off"] is None
    assert gzipped.headers["content-encoding"] == "gzip"
    assert len(rec) >= 3
    polls = list(rec)
    last = polls[-1]
    (e,) = last.engines
    names = {s.name for s in e.samples or ()}
    assert "vllm:num_requests_running" in names
    assert e.engine == "vllm"
    assert last.gateway is not None
    assert last.gateway["limits"]["max_concurrency"] == 3
    assert last.gateway["outcomes"]["completed"] >= 12
    changes = [ev for p in polls for ev in p.events]
    assert [(c["field"], c["new"], c["source"]) for c in changes] == [
        ("max_concurrency", 3, "carol")
    ]
    before = rec.times[-1]
    # the same folder after a restart: the past is still there, and a new segment goes on
    with gateway(engine, port, "--history-dir", str(folder)) as gw:
        again = await until_polled(gw, lambda rec: rec.times[-1] > before)
    assert again.times[0] <= rec.times[0] + 1
    assert again.times[-1] > before
    assert [ev["source"] for p in again for ev in p.events] == ["carol"]


async def test_an_unwritable_history_folder_leaves_the_gateway_serving(
    tmp_path: Path, engine: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    log = tmp_path / "gateway.log"
    with gateway(engine, free_port(), "--history-dir", str(blocker / "history"), log=log) as gw:
        await load(gw, 4)
        async with httpx.AsyncClient(base_url=gw) as c:
            history = (await c.get("/admin/stats")).json()["history"]
            answer = await c.get("/admin/history?since=1m")
    assert history["on"] is False
    assert "cannot make the folder" in history["why_off"]
    assert answer.status_code == 200  # a header, no polls: a recording with nothing in it
    text = log.read_text()
    assert text.count("history off") == 1
    assert "serving goes on" in text
