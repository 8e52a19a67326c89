"""A real `llmtop sim --dialect sglang` process, under load, read by `llmtop snapshot --json`:
its /metrics are SGLang's names only, and the engine's figures come through them."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

pytestmark = [pytest.mark.xdist_group("realtime-load"), pytest.mark.slow(15)]

PROMPT = list(range(400))  # token ids: exactly 400 prompt tokens
MAX_TOKENS = 1600  # 2,000 a request in the fast profile's 4,096 KV tokens: two fit, the rest wait
STREAMS = 6
LLMTOP = (sys.executable, "-m", "llmtop")


@pytest.fixture
def sglang_sim() -> Iterator[str]:
    """`llmtop sim --dialect sglang` on a free port; its URL. Ctrl-C at teardown."""
    with subprocess.Popen(
        [*LLMTOP, "sim", "--profile", "fast", "--port", "0", "--dialect", "sglang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            m = re.fullmatch(
                r"llmtop sim: profile fast \(4,096 KV tokens, max_num_seqs 256,"
                r" /metrics in SGLang's names\) listening on (http://127\.0\.0\.1:\d+)\n",
                line,
            )
            assert m, line
            yield m.group(1)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(15) in (0, 130)
            assert proc.stderr is not None
            assert "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def load(url: str, started: threading.Barrier, stop: threading.Event) -> None:
    """One long streamed request, hung up on when `stop` is set (the sim aborts it)."""
    started.wait()
    body = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}
    with (
        contextlib.suppress(httpx.HTTPError),
        httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r,
    ):
        for _ in r.iter_lines():
            if stop.is_set():
                return


def test_snapshot_reads_a_real_sglang_sim(sglang_sim: str) -> None:
    url = sglang_sim
    info = httpx.get(f"{url}/get_server_info", timeout=5).json()
    assert info["engine"] == "sglang"
    assert info["max_total_num_tokens"] == 4096
    assert info["version"].startswith("llmtop-sim/")
    assert httpx.get(f"{url}/version", timeout=5).status_code == 404  # vLLM's, not SGLang's
    httpx.get(f"{url}/metrics", timeout=5)  # the first scrape of a cold process is slow
    started, stop = threading.Barrier(STREAMS + 1), threading.Event()
    threads = [
        threading.Thread(target=load, args=(url, started, stop), daemon=True)
        for _ in range(STREAMS)
    ]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(1.0)  # the first prefills done: what the snapshot reads is the steady load
    try:
        done = subprocess.run(
            [*LLMTOP, "snapshot", "--vllm", url, "--gateway", "off", "--json", "--window-s", "2"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
        assert "sglang:num_running_reqs{" in metrics
        assert 'tp_rank="0"' in metrics
        assert "vllm:" not in metrics
        assert done.returncode in (0, 1, 2), done.stderr  # a verdict, not unknown (3) or an error
        assert "Traceback" not in done.stderr
        (engine,) = json.loads(done.stdout)["engines"]
        assert engine["up"] is True
        assert engine["model"] == "llmtop-sim"
        named = engine.get("engine")  # the engine as the snapshot names it
        if named is not None:
            kind = named["kind"] if isinstance(named, dict) else named
            assert kind == "sglang"
        assert engine["kv_capacity_tokens"] == 4096  # SGLang's max_total_num_tokens, in tokens
        assert engine["running"] >= 1
        assert engine["waiting"] >= 1  # a 2,000-token request each: not all fit
        assert engine["kv_cache_usage_frac"] > 0.5
        assert engine["decode_tok_per_s"] > 0
    finally:
        stop.set()  # hang up before the sim stops: nothing in flight at its Ctrl-C
        for t in threads:
            t.join(10)


@pytest.mark.slow(30)
def test_the_demo_tells_the_seeds_story_on_sglang() -> None:
    """`llmtop demo --dialect sglang`: the KV cache named full from SGLang's token usage and
    retractions, and the cap it suggests applied, as on vLLM (docs/demo.md has whole runs)."""
    demo = ("demo", "--headless", "--scenario", "quick", "--duration-s", "20")
    flags = ("--apply-cap", "auto@14", "--json", "--dialect", "sglang")
    out = subprocess.run(
        [*LLMTOP, *demo, *flags],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    doc = json.loads(out.stdout)
    assert doc["dialect"] == "sglang"
    events = doc["events"]
    fired = {e["id"]: e for e in events if e["kind"] == "finding_fired"}
    assert fired["kv-exhausted"]["t"] < 14, fired
    assert "preemptions/s" in fired["kv-exhausted"]["summary"]  # SGLang's retractions
    (cap,) = [e for e in events if e["kind"] == "cap_applied"]
    assert cap["finding"] == "kv-exhausted"
    assert f":cap {cap['max_concurrency']}" in cap["action"]
    figures = [e for e in events if e["kind"] == "figures"]
    assert max(f["waiting"] or 0 for f in figures) > 0
    assert all(f["kv_cache_usage_frac"] is not None for f in figures if f["t"] > 1)
    assert doc["load"]["errors"] == 0


def test_an_unknown_dialect_is_one_line() -> None:
    for command in (["sim", "--port", "0"], ["demo", "--headless"]):
        out = subprocess.run(
            [*LLMTOP, *command, "--dialect", "sglangx"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 2
        (line,) = out.stderr.strip().splitlines()
        assert "--dialect: unknown engine kind 'sglangx': one of vllm, sglang" in line
