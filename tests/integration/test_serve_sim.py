"""`llmtop serve` with the sim standing in for vLLM: it starts, serves through the gateway,
and Ctrl-C (or llmtop's own death) leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmtop.serve.stack import free_port, group_alive

TINY = str(Path(__file__).parents[1] / "fixtures" / "models" / "tiny-llama")
SIM = (
    "{python} -m llmtop sim --profile fast --host {host} --port {port} "
    "--max-num-seqs {max_num_seqs} --max-model-len {max_model_len} --kv-tokens {kv_tokens}"
)


def ignore_sigint() -> None:
    """As a shell does for a background job (`pytest ... &`): SIGINT ignored from the start."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_serve(
    tmp_path: Path, engine_cmd: str = SIM, *, sigint_ignored: bool = False
) -> tuple[subprocess.Popen[str], str]:
    listen = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmtop",
            "serve",
            TINY,
            "--no-tui",
            "--listen",
            listen,
            "--log-dir",
            str(tmp_path),
            "--engine-cmd",
            engine_cmd,
            "--num-gpu-blocks-override",
            "81",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )
    return proc, listen


def read_until(proc: subprocess.Popen[str], pattern: str, timeout_s: float = 60.0) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no {pattern!r} in:\n{''.join(lines)}")


def pids(lines: list[str]) -> dict[str, int]:
    return {
        m.group(1): int(m.group(2))
        for m in (re.match(r"(engine|gateway)\s+pid (\d+) ready", ln) for ln in lines)
        if m
    }


@pytest.fixture
def cleanup() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()


def gone(pgid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
def test_serves_through_the_gateway_and_ctrl_c_stops_everything(
    tmp_path: Path, cleanup: list[subprocess.Popen[str]], sigint_ignored: bool
) -> None:
    """Also when llmtop starts with SIGINT ignored, as under a suite run in the background:
    it stopped nothing then, until the test's 30 s ran out and its cleanup killed it."""
    proc, listen = start_serve(tmp_path, sigint_ignored=sigint_ignored)
    cleanup.append(proc)
    lines = read_until(proc, r"^gateway\s+pid \d+ ready")
    text = "".join(lines)
    # the plan the sim was started with: 81 blocks of 128 tokens (vLLM's CPU block size)
    assert "KV tokens    81 x 128 = 10,368 tokens" in text
    assert "--max-num-seqs 8  = 10,368 KV tokens // 1,250 per request" in text
    started = pids(lines)
    assert set(started) == {"engine", "gateway"}
    r = httpx.post(
        f"http://{listen}/v1/completions", json={"prompt": "hello", "max_tokens": 3}, timeout=30
    )
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 3
    stats = httpx.get(f"http://{listen}/admin/stats", timeout=5).json()
    if "--autopilot" in text:  # the KV budget admits; max_concurrency is only a ceiling then
        assert stats["limits"]["mode"] == "auto"
    else:
        assert stats["limits"]["max_concurrency"] == 8
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(30) == 0
    assert proc.stdout is not None
    assert "stopped: gateway" in proc.stdout.read()
    for pid in started.values():
        assert gone(pid), f"process group {pid} still alive"
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


def test_killed_llmtop_takes_its_children_along(
    tmp_path: Path, cleanup: list[subprocess.Popen[str]]
) -> None:
    if sys.platform != "linux":
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    proc, _ = start_serve(tmp_path)
    cleanup.append(proc)
    started = pids(read_until(proc, r"^gateway\s+pid \d+ ready"))
    os.kill(proc.pid, signal.SIGKILL)  # no finally runs: only the children's death signal
    proc.wait(10)
    for pid in started.values():
        assert gone(pid), f"process group {pid} outlived a killed llmtop"


def test_an_engine_that_dies_at_start_is_exit_4_with_its_log(
    tmp_path: Path, cleanup: list[subprocess.Popen[str]]
) -> None:
    proc, _ = start_serve(
        tmp_path, engine_cmd="{python} -c \"print('no GPU here'); raise SystemExit(3)\""
    )
    cleanup.append(proc)
    assert proc.wait(60) == 4
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert "the engine exited with code 3 before it was ready" in err
    assert "no GPU here" in err
    assert "Traceback" not in err


def test_the_screen_gets_both_urls_and_leaving_it_stops_everything(tmp_path: Path) -> None:
    """The TUI path in-process: the attached screen (here a stand-in) gets the engine's and the
    gateway's URLs while both answer; when it returns (`q`), both process groups are gone."""
    from llmtop.serve.plan import Plan
    from llmtop.serve.run import Commands, ServeOptions, serve

    seen: dict[str, object] = {}

    def screen(cmds: Commands, plan: Plan) -> int:
        seen["engine"] = httpx.get(cmds.engine_url + "/health", timeout=5).status_code
        seen["gateway"] = httpx.get(cmds.gateway_url + "/admin/stats", timeout=5).status_code
        seen["seqs"] = plan.max_num_seqs
        return 0

    said: list[str] = []
    opts = ServeOptions(
        model=TINY,
        vllm_args=("--num-gpu-blocks-override", "81"),
        listen=f"127.0.0.1:{free_port()}",
        engine_cmd=SIM,
        log_dir=str(tmp_path),
    )
    assert serve(opts, say=said.append, tui=screen) == 0
    assert seen == {"engine": 200, "gateway": 200, "seqs": 8}
    started = pids([line + "\n" for text in said for line in text.splitlines()])
    assert set(started) == {"engine", "gateway"}
    for pid in started.values():
        assert gone(pid), f"process group {pid} still alive"


def test_a_taken_listen_port_is_exit_4_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from llmtop.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(
            ["serve", TINY, "--no-tui", "--listen", f"127.0.0.1:{port}", "--log-dir",
             str(tmp_path), "--engine-cmd", SIM, "--num-gpu-blocks-override", "81"]
        )  # fmt: skip
    assert code == 4
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err
    assert not list(tmp_path.iterdir())  # no log dir: nothing was started
