"""A real `llmtop gateway` process in front of a real `llmtop sim`, sent SIGTERM with a stream in
flight: /readyz fails at once while new requests are still served for the grace, then new
connections are refused and the stream finishes (longer than uvicorn's old fixed 3 s); at the
drain timeout, or at a second signal, what is left ends with an error event; never a traceback.
Two gateways sharing limits through a real Redis: the other names the draining one at once.

Every wait is on an event (a byte read, /readyz flipping, the process's exit) with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.redis_server import redis_server
from harness.terminal import Server, clean_env, get_json, wait_until

pytestmark = pytest.mark.xdist_group("gateway-drain")

TOKENS = 200
"""A 200-token stream on the seed profile takes about 6 s: longer than the old 3 s."""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("drain")
    server = Server(["sim", "--profile", "seed", "--port", "0"], clean_env(tmp), tmp / "sim.log")
    yield server
    server.stop()


def start_gateway(sim: Server, tmp: Path, *flags: str) -> Server:
    args = ["gateway", "--vllm", sim.url, "--listen", "127.0.0.1:0", *flags]
    return Server(args, clean_env(tmp), tmp / "gateway.log")


class Stream:
    """One streamed completion on a thread: the events it read and when it ended."""

    def __init__(self, url: str, max_tokens: int = TOKENS) -> None:
        self.events: list[str] = []
        self.first = threading.Event()
        self.ended_at: float | None = None
        self.error: str | None = None
        body = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": max_tokens, "stream": True}
        self._thread = threading.Thread(target=self._run, args=(url, body), daemon=True)
        self._thread.start()

    def _run(self, url: str, body: dict[str, object]) -> None:
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line[6:])
                        self.first.set()
        except httpx.HTTPError as e:
            self.error = f"{type(e).__name__}: {e}"
        self.ended_at = time.monotonic()
        self.first.set()

    def join(self, timeout_s: float = 60) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the stream did not end"

    def tokens(self) -> int:
        return sum(1 for e in self.events if e.startswith("{") and '"text"' in e)


def readyz(url: str) -> tuple[int, dict[str, object]]:
    r = httpx.get(url + "/readyz", timeout=5)
    return r.status_code, r.json()


def exited(gw: Server, timeout_s: float = 30) -> int:
    return int(wait_until(lambda: gw.proc.poll() is not None, "the gateway exited", timeout_s))


def log_of(gw: Server) -> str:
    return gw.log.read_text(errors="replace")


@pytest.mark.slow(12)
def test_sigterm_fails_readiness_serves_the_grace_then_drains_the_stream(
    sim: Server, tmp_path: Path
) -> None:
    gw = start_gateway(sim, tmp_path, "--drain-grace-s", "1.5", "--drain-timeout-s", "60")
    try:
        assert readyz(gw.url) == (200, {"ready": True, "phase": "ready"})
        stream = Stream(gw.url)
        assert stream.first.wait(30)
        assert stream.error is None
        os.kill(gw.proc.pid, signal.SIGTERM)
        sent = time.monotonic()
        _status, doc = wait_until(
            lambda: (r := readyz(gw.url))[0] == 503 and r, "/readyz fails after SIGTERM", 5
        )
        assert doc["phase"] == "grace"
        assert doc["signal"] == "SIGTERM"
        # in the grace, a new connection is still served, whole
        new = httpx.post(
            gw.url + "/v1/completions",
            json={"model": "llmtop-sim", "prompt": "x", "max_tokens": 4},
            timeout=30,
        )
        assert new.status_code == 200
        assert new.json()["choices"][0]["text"]
        # after it the listener is closed: a new connection is refused
        refused_at = wait_until(lambda: _refused(gw.url), "new connections refused", 10)
        assert refused_at - sent >= 1.5 - 0.05  # never before the grace is over
        stream.join()
        assert stream.error is None, stream.error
        assert stream.tokens() == TOKENS
        assert stream.events[-1] == "[DONE]"
        assert stream.ended_at is not None
        assert stream.ended_at - sent > 3.0
        exited(gw)
        assert gw.proc.returncode == -signal.SIGTERM  # raised again once served (uvicorn's rule)
        log = log_of(gw)
        assert "Traceback" not in log, log
        assert "CancelledError" not in log, log
        assert log.count("/readyz fails") == 1
        # its counts as it stops, final: the stream and the request in the grace
        counts = json.loads(log.split("llmtop gateway: stopped: ", 1)[1].splitlines()[0])
        assert counts["answers"] == {"200": 2}
        assert counts["offered"] == 2
        assert counts["outcomes"]["completed"] == 2
    finally:
        gw.stop()


def _refused(url: str) -> float | None:
    """When a new connection was refused: the listener is closed, else None.

    A connection the kernel took into the listen backlog just before the listener closed is
    reset, not refused (no response: httpx's ReadError, WriteError or RemoteProtocolError). That
    is the same refusal, once the connections after it are refused too; a reset while the
    gateway still answers is a failure, not a refusal."""
    try:
        httpx.get(url + "/healthz", timeout=2)
    except httpx.ConnectError:
        return time.monotonic()
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as e:
        reset_at, reset = time.monotonic(), e
    else:
        return None
    deadline = reset_at + 2.0
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/healthz", timeout=2)
        except httpx.ConnectError:
            return reset_at
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as e:
            reset = e  # the backlog drained one more; the next is refused or answered
            continue
        raise AssertionError(f"a connection was reset ({reset!r}) while the gateway answers")
    raise AssertionError(f"connections reset for 2 s ({reset!r}), never refused")


def _error_event(stream: Stream) -> dict[str, object]:
    assert stream.error is None, stream.error
    assert stream.events[-1] == "[DONE]", stream.events[-3:]
    doc = json.loads(stream.events[-2])
    assert isinstance(doc, dict), doc
    assert "error" in doc, doc
    return dict(doc["error"])


@pytest.mark.slow(6)
def test_what_is_left_at_the_drain_timeout_ends_with_an_error_event(
    sim: Server, tmp_path: Path
) -> None:
    gw = start_gateway(sim, tmp_path, "--drain-grace-s", "0", "--drain-timeout-s", "1")
    try:
        stream = Stream(gw.url)
        whole: list[httpx.Response] = []
        body = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": TOKENS}
        plain = threading.Thread(
            target=lambda: whole.append(
                httpx.post(gw.url + "/v1/completions", json=body, timeout=60)
            )
        )
        plain.start()
        assert stream.first.wait(30)
        wait_until(lambda: httpx.get(gw.url + "/admin/stats").json()["in_flight"] == 2, "both in")
        os.kill(gw.proc.pid, signal.SIGTERM)
        stream.join()
        plain.join(30)
        error = _error_event(stream)
        assert error["type"] == "gateway_shutting_down"
        assert "drain_timeout_s (1 s)" in str(error["message"])
        assert 0 < stream.tokens() < TOKENS
        assert whole[0].status_code == 503
        assert whole[0].json()["error"]["code"] == 503
        exited(gw)
        log = log_of(gw)
        assert "Traceback" not in log, log
        assert "CancelledError" not in log, log
        assert log.count("drain over: 2 requests cut") == 1, log
        counts = json.loads(log.split("llmtop gateway: stopped: ", 1)[1].splitlines()[0])
        assert counts["answers"] == {"200": 1, "503": 1}
        assert counts["outcomes"]["upstream_error"] == 2
    finally:
        gw.stop()


@pytest.mark.slow(6)
def test_a_second_signal_ends_at_once(sim: Server, tmp_path: Path) -> None:
    gw = start_gateway(sim, tmp_path, "--drain-grace-s", "30", "--drain-timeout-s", "120")
    try:
        stream = Stream(gw.url)
        assert stream.first.wait(30)
        os.kill(gw.proc.pid, signal.SIGTERM)
        wait_until(lambda: readyz(gw.url)[0] == 503, "/readyz fails", 5)
        os.kill(gw.proc.pid, signal.SIGINT)
        second = time.monotonic()
        exited(gw, 10)
        assert time.monotonic() - second < 5.0  # not the 30 s grace, nor the 120 s drain
        stream.join()
        assert "second signal" in str(_error_event(stream)["message"])
        log = log_of(gw)
        assert "Traceback" not in log, log
        assert "KeyboardInterrupt" not in log, log
    finally:
        gw.stop()


@pytest.mark.slow(10)
def test_a_draining_gateway_is_counted_by_its_peer_until_it_stops(
    sim: Server, tmp_path: Path
) -> None:
    with redis_server() as redis:
        flags = ["--redis", redis.url, "--lease-ttl-s", "1", "--drain-grace-s", "0.5"]
        args = ["gateway", "--vllm", sim.url, "--listen", "127.0.0.1:0", *flags]
        gws = [Server(args, clean_env(tmp_path), tmp_path / f"gw{i}.log") for i in range(2)]
        rolled, peer = gws

        def shared(gw: Server) -> dict[str, object]:
            return dict(get_json(gw.url + "/admin/stats")["shared"])

        try:
            wait_until(
                lambda: all(shared(g)["live_gateways"] == 2 for g in gws), "both registered", 10
            )
            assert shared(peer)["draining_gateways"] == 0
            stream = Stream(rolled.url)
            assert stream.first.wait(30)
            os.kill(rolled.proc.pid, signal.SIGTERM)
            wait_until(lambda: shared(peer)["draining_gateways"] == 1, "a draining peer", 5)
            metrics = httpx.get(peer.url + "/metrics", timeout=5).text
            assert "llmtop_gateway_shared_draining_gateways 1.0" in metrics
            # half the stream later (seconds past the 1 s TTL): still draining, still renewing
            wait_until(lambda: stream.tokens() >= TOKENS // 2, "half the stream", 30)
            assert stream.ended_at is None
            now = shared(peer)
            assert (now["draining_gateways"], now["live_gateways"]) == (1, 2)
            stream.join()
            assert stream.error is None, stream.error
            assert stream.tokens() == TOKENS
            exited(rolled)
            after = wait_until(
                lambda: (d := shared(peer))["live_gateways"] == 1 and d, "its lease given back", 5
            )
            assert after["draining_gateways"] == 0
            assert "Traceback" not in log_of(rolled)
        finally:
            for g in gws:
                g.stop()
