"""`llmtop gateway` on the command line: banner, proxying, token from env, one-line errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main
from llmtop.serve.stack import free_port


def test_serves_with_token_from_env_and_stops_on_ctrl_c(
    start_sim: Callable[..., ServerThread],
) -> None:
    sim = start_sim(profile="fast")
    env = {**os.environ, "LLMTOP_ADMIN_TOKEN": "tok-123", "LLMTOP_QUEUE_TIMEOUT": "7"}
    cmd = [sys.executable, "-m", "llmtop", "gateway", "--vllm", sim.url]
    cmd += ["--listen", f"127.0.0.1:{free_port()}", "--max-concurrency", "3"]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            m = re.match(r"llmtop gateway on (http://127\.0\.0\.1:\d+) -> ", line)
            assert m, line
            url = m.group(1)
            assert "token required" in line
            assert "tok-123" not in line
            r = httpx.post(
                f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=10
            )
            assert r.json()["usage"]["completion_tokens"] == 2
            assert httpx.get(f"{url}/admin/limits").status_code == 401
            limits = httpx.get(
                f"{url}/admin/limits", headers={"authorization": "Bearer tok-123"}
            ).json()
            assert limits["max_concurrency"] == 3
            assert limits["queue_timeout_s"] == 7.0
            proc.send_signal(signal.SIGINT)
            assert proc.wait(15) in (0, 130)
            assert proc.stderr is not None
            err = proc.stderr.read()
            assert "Traceback" not in err
            assert "tok-123" not in err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_port_in_use_is_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["gateway", "--listen", f"127.0.0.1:{port}"]) == 4
    err = capsys.readouterr().err
    assert "already in use" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--listen", "0.0.0.0:0"], "without an admin token"),
        (["--listen", "nonsense"], "bad listen address"),
        (["--max-concurrency", "0", "--listen", "127.0.0.1:0"], "max_concurrency"),
        (["--admin-token-file", "/nonexistent/tok"], "admin token file"),
        (["--eject-s", "-1", "--listen", "127.0.0.1:0"], "eject_s must be >= 0"),
        (["--replica-max-concurrency", "0", "--listen", "127.0.0.1:0"], "replica_max_conc"),
        (["--redis", "notaurl", "--listen", "127.0.0.1:0"], "redis_url 'notaurl'"),
    ],
)
def test_bad_settings_are_one_line_errors(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("LLMTOP_ADMIN_TOKEN", raising=False)
    code = main(["gateway", *args])
    err = capsys.readouterr().err
    assert code in (2, 4)
    assert needle in err
    assert len(err.strip().splitlines()) == 1
