"""vLLM's priority scheduler behind the gateway (real vLLM CPU build, opt-in): with
`--scheduling-policy priority`, `llmtop serve` turns on the gateway's engine_priority, and a
normal request sent after three low ones gets its first token before them inside vLLM; with
fcfs (the control) it comes after them."""

from __future__ import annotations

import asyncio
import contextlib
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


def start_serve(vllm: Path, listen: str, logs: Path, policy: str) -> subprocess.Popen[str]:
    """`llmtop serve` on the tiny model, vLLM running one request at a time."""
    argv = [
        sys.executable, "-m", "llmtop", "serve", str(DIR / "model"),
        "--no-tui", "--listen", listen, "--vllm-bin", str(vllm), "--log-dir", str(logs),
        "--ready-timeout-s", "400",
        "--served-model-name", "tinyllm", "--dtype", "bfloat16", "--enforce-eager",
        "--max-num-batched-tokens", "2048", "--num-gpu-blocks-override", "32",
        "--gpu-memory-utilization", "0.3",
        "--scheduling-policy", policy, "--max-num-seqs", "1",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip


def pin_engine_core(engine_pid: int) -> None:
    """What scripts/real-vllm does: bind every EngineCore thread to the worker's CPUs, or on 2
    cores its busy-wait starves the API server and streamed tokens arrive in one late burst
    (which would hide the order the requests were served in)."""
    group: dict[str, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = (stat.parent / "comm").read_text().strip()
        except OSError:
            continue
        if int(fields[2]) == engine_pid:  # the process group
            group[comm] = int(stat.parent.name)
    core, worker = group.get("VLLM::EngineCor"), group.get("VLLM::Worker")
    if core is None or worker is None:
        pytest.skip(f"no EngineCore/Worker in the engine's group: {sorted(group)}")
    cpus = os.sched_getaffinity(worker)
    for task in Path(f"/proc/{core}/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cpus)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("policy", ["priority", "fcfs"])
async def test_priorities_hold_inside_vllm(tmp_path: Path, policy: str) -> None:
    vllm = DIR / "venv" / "bin" / "vllm"
    if not vllm.exists():
        pytest.skip("scripts/real-vllm setup has not run")
    listen = f"127.0.0.1:{free_port()}"
    proc = start_serve(vllm, listen, tmp_path, policy)
    pids: list[int] = []
    try:
        text = "".join(lines_until(proc, r"^gateway\s+pid \d+ ready", 450))
        pids = [int(p) for p in re.findall(r"pid (\d+) ready", text)]
        assert ("--engine-priority" in text) == (policy == "priority")
        pin_engine_core(pids[0])
        gw = f"http://{listen}"
        firsts: dict[str, float] = {}
        t0 = time.monotonic()

        async def ask(c: httpx.AsyncClient, name: str, prio: str, tokens: int) -> None:
            body = {"model": "tinyllm", "prompt": "def f(x):", "max_tokens": tokens,
                    "stream": True, "ignore_eos": True}  # fmt: skip
            async with c.stream(
                "POST", "/v1/completions", json=body, headers={"x-llmtop-priority": prio}
            ) as r:
                assert r.status_code == 200
                async for _ in r.aiter_bytes():
                    firsts.setdefault(name, time.monotonic() - t0)

        async with httpx.AsyncClient(base_url=gw, timeout=300) as c:
            # let requests through to vLLM's own queue (it runs one at a time)
            # (and out of the autopilot's KV budget and deadline queue: this is about vLLM's)
            r = await c.patch(
                "/admin/limits",
                json={"max_concurrency": 8, "max_inflight_kv_blocks": None, "queue_policy": "fifo"},
            )
            assert r.status_code == 200
            tasks = [asyncio.ensure_future(ask(c, "busy", "low", 1500))]
            await asyncio.sleep(1.0)
            for i in range(3):
                tasks.append(asyncio.ensure_future(ask(c, f"low{i}", "low", 8)))
                await asyncio.sleep(0.3)
            tasks.append(asyncio.ensure_future(ask(c, "normal", "normal", 8)))
            await asyncio.gather(*tasks)
        sys.stdout.write(f"first bytes (s after start): {firsts}\n")
        if policy == "priority":
            assert all(firsts["normal"] < firsts[f"low{i}"] for i in range(3)), firsts
        else:  # the control: first come, first served, whatever the gateway's priority
            assert all(firsts["normal"] > firsts[f"low{i}"] for i in range(3)), firsts
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in pids:
            if group_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
