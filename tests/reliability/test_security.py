"""Security of the admin API and of what llmtop writes down.

- With a token set, every admin route and method needs `Authorization: Bearer <token>` (401
  otherwise, fuzzed), compared with hmac.compare_digest.
- `llmtop gateway` refuses a non-loopback address without a token, before binding anything.
- The admin token, a wrong guess at it, and a proxied client key (`Authorization: Bearer sk-...`)
  never appear in the gateway's log output (a real `llmtop gateway` process, and every Python
  logger at DEBUG in-process), its answers, events or /metrics, the TUI's admin error messages,
  or a recording.

tests/unit/test_gateway_admin.py checks the basic 401 and the token file; this adds the fuzz,
the CLI refusal, and the leak hunt across every output.
"""

from __future__ import annotations

import asyncio
import gzip
import hmac
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.errors import AdminError
from llmtop.gateway.server.app import create_app
from llmtop.recording.writer import Recorder
from llmtop.settings import GatewaySettings, HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.sources.gateway import AdminClient
from tests.support.faults import FIGURES, FaultUpstream

TOKEN = "tok-3f9a1c7e5b2d4a60"
GUESS = "tok-guess-0000000000"
KEY = "sk-live-9d8c7b6a5f4e3d2c"
SECRETS = (TOKEN, GUESS, KEY)
ROUTES = [
    ("GET", "/admin/limits"),
    ("PATCH", "/admin/limits"),
    ("GET", "/admin/stats"),
    ("GET", "/admin/events"),
    ("POST", "/admin/pause"),
    ("POST", "/admin/resume"),
]


def assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret[:6]}... found in {where}"


def run(coro: Any) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


# ---- the token is required, and compared in constant time ----------------------------------


def test_every_admin_route_needs_the_token_fuzzed(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    app = create_app(GatewaySettings(upstream="http://127.0.0.1:9", admin_token=TOKEN))
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")
    tried = 0

    def call(method: str, path: str, auth: bytes | None) -> httpx.Response:
        headers = [(b"authorization", auth)] if auth is not None else []
        response: httpx.Response = loop.run_until_complete(
            client.request(method, path, headers=headers, content=b"{}")
        )
        return response

    near = st.sampled_from(
        [
            b"",
            b"Bearer",
            b"Bearer ",
            b"Basic " + TOKEN.encode(),
            b"Token " + TOKEN.encode(),
            b"Bearer " + TOKEN[:-1].encode(),
            b"Bearer " + TOKEN.encode() + b"x",
            b"Bearer " + TOKEN.upper().encode(),
            b"Bearer " + GUESS.encode(),
            TOKEN.encode(),
        ]
    )

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(route=st.sampled_from(ROUTES), auth=near | st.binary(max_size=40) | st.none())
    def check(route: tuple[str, str], auth: bytes | None) -> None:
        nonlocal tried
        tried += 1
        r = call(*route, auth)
        assert r.status_code == 401, (route, auth, r.status_code)
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["type"] == "authentication_error"
        assert_clean(r.text + str(r.headers), "a 401")

    try:
        check()
        for route in ROUTES:
            for auth in (b"Bearer " + TOKEN.encode(), b"bearer  " + TOKEN.encode() + b" "):
                r = call(*route, auth)
                assert r.status_code == 200, (route, auth, r.text)
                assert_clean(r.text + str(r.headers), "an admin answer")
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    # every bearer attempt went through the constant-time compare, against the token
    assert compared
    assert set(compared) == {TOKEN.encode()}
    FIGURES["inputs"] += tried + 2 * len(ROUTES)


# ---- `llmtop gateway` refuses to expose the admin API without a token ------------------------


def gateway_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LLMTOP_")}
    return subprocess.run(
        [sys.executable, "-m", "llmtop", "gateway", "--vllm", "http://127.0.0.1:9", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, "XDG_CONFIG_HOME": "/nonexistent", **(env or {})},
    )


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port held open on every address: binding it would fail with 'in use'."""
    with socket.create_server(("0.0.0.0", 0)) as s:
        yield s.getsockname()[1]


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "10.1.2.3", "example.com"])
def test_non_loopback_without_token_is_refused_before_binding(host: str, held_port: int) -> None:
    done = gateway_cli("--listen", f"{host}:{held_port}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    assert "refusing to listen on" in lines[0]
    assert "without an admin token" in lines[0]
    # the port is held: had it tried to bind first, this would be "already in use" (exit 4)
    assert "in use" not in done.stderr
    assert done.stdout == ""
    FIGURES["inputs"] += 1


def test_with_a_token_it_goes_on_to_bind(held_port: int) -> None:
    # the held port makes the bind fail, so nothing is exposed, and proves it got that far
    done = gateway_cli("--listen", f"0.0.0.0:{held_port}", env={"LLMTOP_ADMIN_TOKEN": TOKEN})
    assert done.returncode == 4, done.stderr
    assert "already in use" in done.stderr
    assert_clean(done.stdout + done.stderr, "the CLI's output")


# ---- the secrets never leak ------------------------------------------------------------------


async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def exercise(url: str, up: FaultUpstream) -> list[httpx.Response]:
    """Admin calls right and wrong, and proxied calls carrying a client key, through faults."""
    ok = {"authorization": f"Bearer {TOKEN}", "x-llmtop-source": "test"}
    key = {"authorization": f"Bearer {KEY}", "x-llmtop-tenant": ""}
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        out.append(await c.get("/admin/stats", headers={"authorization": f"Bearer {GUESS}"}))
        out.append(await c.patch("/admin/limits", json={"max_queue": 3}, headers=ok))
        out.append(await c.patch("/admin/limits", json={"max_queue": "many"}, headers=ok))
        out.append(await c.patch("/admin/limits", json={"rate_limit_rpm": 1.0}, headers=ok))
        for _ in range(2):  # the second is rate-limited by the key's tenant
            out.append(await c.post("/v1/completions", json={"prompt": "hi"}, headers=key))
        out.append(await c.post("/v1/chat/completions", content=b"{", headers=key))
        out.append(await c.get("/v1/models", headers=key))
        for path in ("/admin/stats", "/admin/events", "/admin/limits"):
            out.append(await c.get(path, headers=ok))
        out.append(await c.get("/metrics"))
        out.append(await c.get("/healthz"))
    return out


async def test_no_secret_in_in_process_logs_answers_events_or_metrics(
    serve_app: Callable[[Any], ServerThread],
    fault_upstream: Callable[..., FaultUpstream],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger: httpx, httpcore, uvicorn, asyncio, llmtop
    up = fault_upstream(hang)
    gw = serve_app(
        create_app(GatewaySettings(upstream=up.url, admin_token=TOKEN, upstream_read_timeout_s=0.3))
    )
    answers = await exercise(gw.url, up)
    assert [a.status_code for a in answers[:4]] == [401, 200, 400, 200]
    # one request a minute per key: the second and the malformed one are rate-limited
    assert [a.status_code for a in answers[4:7]] == [504, 429, 429]
    for a in answers:
        assert_clean(a.text + str(a.headers), f"the answer to {a.request.url.path}")
    # the upstream got the client's key: it is the engine's to check, the gateway passes it on
    assert any(KEY.encode() in head for head, _ in up.seen)
    assert caplog.records, "nothing was logged at DEBUG: the check would be empty"
    assert_clean(caplog.text, "the Python logs")
    FIGURES["inputs"] += len(answers)


async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\noops")
    await writer.drain()


def test_no_secret_in_a_gateway_process_output(
    fault_upstream: Callable[..., FaultUpstream],
) -> None:
    up = fault_upstream(refuse)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmtop", "gateway", "--vllm", up.url,
         "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "LLMTOP_ADMIN_TOKEN": TOKEN, "XDG_CONFIG_HOME": "/nonexistent"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "llmtop gateway on http://" in banner, banner
        assert "admin API: token required" in banner
        url = banner.split(" on ", 1)[1].split()[0]
        answers = run(exercise(url, up))
        assert answers[0].status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert_clean(banner + out, "the gateway's stdout/stderr")
    FIGURES["inputs"] += len(answers)


async def test_tui_admin_errors_never_show_the_token(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway("http://127.0.0.1:9", admin_token=TOKEN)
    wrong = AdminClient(gw.url, GUESS)
    right = AdminClient(gw.url, TOKEN)
    messages = []
    try:
        for call in (wrong.get_limits(), wrong.set_limits(max_queue=1), right.pause()):
            try:
                await call
            except AdminError as e:
                messages.append(str(e))
        with pytest.raises(AdminError) as bad:
            await right.set_limits(max_queue=TOKEN)
        messages.append(str(bad.value))
    finally:
        await wrong.aclose()
        await right.aclose()
    assert len(messages) == 3
    assert "refused the admin token (401" in messages[0]
    for m in messages[:2]:
        assert_clean(m, "an admin error message")
    # the one exception: a value the user typed is quoted back to them in the 400
    assert "max_queue must be an integer" in messages[2]


async def test_no_secret_in_a_recording(
    start_gateway: Callable[..., ServerThread], tmp_path: Path
) -> None:
    gw = start_gateway("http://127.0.0.1:9", admin_token=TOKEN)
    host = gw.url.removeprefix("http://")
    path = tmp_path / "rec.jsonl.gz"
    for gateway_url, token in (
        (gw.url, TOKEN),  # reads fine
        (gw.url, GUESS),  # 401s: the error is recorded
        (f"http://admin:{TOKEN}@{host}", TOKEN),  # a token pasted into the URL
    ):
        monitor = MonitorSettings(
            vllm_urls=(f"http://user:{KEY}@127.0.0.1:9",),
            gateway_url=gateway_url,
            nvml=False,
            admin_token=token,
            record=str(path),
        )
        recorder = Recorder.from_settings(monitor)
        collector = Collector(monitor, HealthSettings(), timeout_s=1.0)
        recorder.open()
        try:
            for _ in range(2):
                snap = await collector.poll()
                recorder.write(collector.last_raw, snap.findings)
        finally:
            recorder.close()
            await collector.aclose()
    text = gzip.decompress(path.read_bytes()).decode()
    assert text.count('"llmtop_recording"') == 3
    assert "401" in text  # the wrong token's refusal is there, without the token
    assert_clean(text, "the recording")
