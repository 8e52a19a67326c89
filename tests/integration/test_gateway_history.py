"""The gateway's history over real sockets: `llmtop sim` and `llmtop gateway` as processes, a
little load, a limit changed with its `who`; /admin/history read as a recording carries the
engine's samples, the gateway's stats and the change, and survives the gateway's restart on
the same folder; an unwritable folder leaves the gateway serving and says why."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from harness.http_ready import wait_ready
from llmtop.core.record.decode import Recording
from llmtop.recording.postmortem import build_report
from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings
from llmtop.sources.history import gateway_history
from tests.support.gateway_queue import Burst, Stack, watch_burst

pytestmark = [pytest.mark.slow(12), pytest.mark.timeout(90)]
LLMTOP = [sys.executable, "-m", "llmtop"]
INTERVAL_S = 1.0
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


async def test_a_corrupt_history_file_is_moved_aside_and_history_starts_afresh(
    tmp_path: Path, engine: str
) -> None:
    port = free_port()
    (tmp_path / f"gateway-{port}.sqlite").write_bytes(b"\x00garbage, not SQLite\n" * 64)
    log = tmp_path / "gateway.log"
    with gateway(engine, port, "--history-dir", str(tmp_path), log=log) as gw:
        rec = await until_polled(gw, lambda rec: len(rec) >= 2)
        async with httpx.AsyncClient(base_url=gw) as c:
            history = (await c.get("/admin/stats")).json()["history"]
    assert history["on"] is True
    assert rec.raw(len(rec) - 1).engines[0].samples
    (aside,) = [n for n in os.listdir(tmp_path) if n.startswith(f"gateway-{port}.sqlite.corrupt-")]
    assert (tmp_path / aside).read_bytes().startswith(b"\x00garbage")
    assert f"moved to {aside}, history starts afresh" in log.read_text()


@pytest.mark.slow(20)
async def test_a_report_from_history_matches_the_report_of_a_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28.3's run, shortened: the console records while the gateway keeps its history;
    `report --gateway URL --since` finds the same findings at the same times within a poll
    (and the phase between the two pollers), and the same limit change by the same hand."""
    monkeypatch.setenv("LLMTOP_HISTORY", "true")
    gateway_args = ("--max-concurrency", "2", "--history-dir", str(tmp_path / "state"))
    record = tmp_path / "console.jsonl.gz"
    health = HealthSettings()
    with Stack(("--profile", "seed"), (*gateway_args, "--drain-grace-s", "0")) as stack:
        burst = Burst(requests=12, prompt=4000, output=128, duration_s=30)
        run = await watch_burst(
            stack.sim_url,
            stack.gateway_url,
            burst,
            watch_s=13,
            raise_to=6,
            raise_after_s=5,
            record=record,
            health=health,
        )
        start = run.snaps[0].time
        history = await gateway_history(stack.gateway_url, None, time.time() - start + 0.5)
    assert run.raised is not None
    recorded = build_report(str(record), health)
    kept = build_report("history", health, recording=history)
    assert recorded.findings, "the run fired no finding: nothing to compare"
    mine = {f.id: f for f in kept.findings}
    assert set(mine) == {f.id for f in recorded.findings}
    # two pollers a phase apart (up to a poll: the gateway's and the console's seconds) each
    # see a crossing at their next poll: within a poll of each other, that phase on top
    near = INTERVAL_S + 1.05
    for theirs in recorded.findings:
        found = mine[theirs.id]
        assert abs(found.fired - theirs.fired) <= near, (found, theirs)
        if theirs.cleared is None:
            assert found.cleared is None, (found, theirs)
        else:
            assert found.cleared is not None, (found, theirs)
            assert abs(found.cleared - theirs.cleared) <= near, (found, theirs)
    changes = [(c.time, c.field, c.old, c.new, c.source) for c in kept.limit_changes]
    assert changes == [(c.time, c.field, c.old, c.new, c.source) for c in recorded.limit_changes]
    assert [c[1:] for c in changes] == [("max_concurrency", 2, 6, "tui")]
