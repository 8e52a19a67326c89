"""`llmtop sim` on the command line: banner, serving, Ctrl-C, and one-line errors."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from llmtop.cli import main


def test_banner_serves_and_stops_on_ctrl_c() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "llmtop", "sim", "--profile", "fast", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            run_and_interrupt(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def run_and_interrupt(proc: subprocess.Popen[str]) -> None:
    """Read the banner, use the server, then Ctrl-C it."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.fullmatch(
        r"llmtop sim: profile fast \(4,096 KV tokens, max_num_seqs 256\)"
        r" listening on (http://127\.0\.0\.1:\d+)\n",
        line,
    )
    assert m, line
    url = m.group(1)
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert r.json()["usage"]["completion_tokens"] == 2
    proc.send_signal(signal.SIGINT)
    assert proc.wait(15) in (0, 130)
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


def test_port_in_use_is_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["sim", "--profile", "fast", "--port", str(port)]) == 4
    err = capsys.readouterr().err
    assert "already in use" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "nope"], "unknown sim profile"),
        (["--profile", "fast", "--max-model-len", "8192"], "does not fit the KV cache"),
        (["--profile", "fast", "--max-num-batched-tokens", "8"], "at least max_num_seqs"),
    ],
)
def test_bad_settings_are_one_line_usage_errors(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
