"""`llmtop serve` on the real vLLM CPU build and the tiny model: right-sized start, a request
through the gateway, and Ctrl-C stopping vLLM's whole process group (API server, EngineCore).

Opt-in like the rest of tests/real (LLMTOP_REAL_VLLM=1, after `scripts/real-vllm setup`); it
starts its own vLLM on a free port, beside any server the other tests use.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from llmtop.serve.stack import free_port, group_alive
from tests.support.serve_real import DIR, lines_until


@pytest.mark.timeout(600)
def test_serve_starts_a_right_sized_vllm_and_stops_it(tmp_path: Path) -> None:
    vllm = DIR / "venv" / "bin" / "vllm"
    if not vllm.exists():
        pytest.skip("scripts/real-vllm setup has not run")
    listen = f"127.0.0.1:{free_port()}"
    argv = [
        sys.executable, "-m", "llmtop", "serve", str(DIR / "model"),
        "--no-tui", "--listen", listen, "--vllm-bin", str(vllm), "--log-dir", str(tmp_path),
        "--expect-prompt-tokens", "700", "--expect-output-tokens", "300",
        "--ready-timeout-s", "400",
        # the script's server, less the flags the plan works out (--max-model-len, --max-num-seqs)
        "--served-model-name", "tinyllm", "--dtype", "bfloat16", "--enforce-eager",
        "--max-num-batched-tokens", "2048", "--num-gpu-blocks-override", "32",
        "--gpu-memory-utilization", "0.3",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    pids: dict[str, int] = {}
    try:
        lines = lines_until(proc, r"^gateway\s+pid \d+ ready", 450)
        text = "".join(lines)
        sys.stdout.write(text)  # the plan, for the run's record (-s)
        # 32 blocks x 128 tokens = 4,096; 4,096 // (700 + 300) = 4 requests at once
        assert "KV tokens    32 x 128 = 4,096 tokens" in text
        assert "--max-num-seqs 4  = 4,096 KV tokens // 1,000 per request" in text
        for m in re.finditer(r"^(engine|gateway)\s+pid (\d+) ready", text, re.M):
            pids[m.group(1)] = int(m.group(2))
        cmdline = Path(f"/proc/{pids['engine']}/cmdline").read_bytes().split(b"\0")
        assert cmdline[cmdline.index(b"--max-num-seqs") :][:2] == [b"--max-num-seqs", b"4"]
        assert cmdline[cmdline.index(b"--max-model-len") :][:2] == [b"--max-model-len", b"2048"]
        gw = f"http://{listen}"
        limits = httpx.get(f"{gw}/admin/stats", timeout=5).json()["limits"]
        if "--autopilot" in text:  # the KV budget admits; max_concurrency is only a ceiling
            assert limits["mode"] == "auto"
        else:
            assert limits["max_concurrency"] == 4
        r = httpx.post(
            f"{gw}/v1/completions",
            json={"model": "tinyllm", "prompt": "def f(x):", "max_tokens": 8},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
        sys.stdout.write(f"stopped in {time.monotonic() - t0:.1f} s\n")
        for pid in pids.values():
            deadline = time.monotonic() + 30
            while group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not group_alive(pid), f"process group {pid} outlived llmtop serve"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in pids.values():
            if group_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
