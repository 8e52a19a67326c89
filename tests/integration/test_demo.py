"""`llmtop demo --headless`: the compressed story end to end in a real process — findings fire
before the cap, the cap applied is the one the finding suggested, the gateway's queue holds the
excess after it, and nothing is left behind."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmtop.demo.headless import describe_cap, parse_cap
from llmtop.demo.scenarios import get_scenario
from llmtop.errors import UsageError
from llmtop.recording.reader import read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.settings import HealthSettings

# Real servers under real-time load: one such module at a time (tests/conftest.py), so that
# two of them never starve each other of the 2 cores.
pytestmark = pytest.mark.xdist_group("realtime-load")

STORY_FINDINGS = {"kv-exhausted", "degraded-200"}
"""The findings the quick story is about: KV cache full, TTFT over the SLO with 0 errors."""
CAP_ADVICE = re.compile(r":cap (\d+)\b")


def port_free(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


@pytest.mark.slow(40)
def test_headless_quick_story_applies_the_cap_the_finding_suggests(tmp_path: Path) -> None:
    """`--apply-cap auto@T`: at T the gateway gets the cap the active finding's action names
    at that poll (read back from the recording of the run), and the engine recovers under it."""
    scenario = get_scenario("quick")
    cap_at = scenario.cap_at_s
    assert cap_at is not None
    path = tmp_path / "quick.jsonl.gz"
    out = subprocess.run(
        [
            sys.executable, "-m", "llmtop", "demo", "--headless", "--scenario", "quick",
            "--duration-s", "38", "--apply-cap", f"auto@{cap_at:g}", "--json",
            "--record", str(path),
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    assert doc["apply_cap"] == {"max_concurrency": "auto", "at_s": cap_at}
    events = doc["events"]
    fired = {e["id"]: e["t"] for e in events if e["kind"] == "finding_fired"}
    cleared = {e["id"]: e["t"] for e in events if e["kind"] == "finding_cleared"}
    (cap,) = [e for e in events if e["kind"] == "cap_applied"]
    n = cap["max_concurrency"]
    assert cap["t"] >= cap_at
    assert cap["from"] == 256
    story = {f for f, t in fired.items() if f in STORY_FINDINGS and t < cap["t"]}
    assert story, f"none of {STORY_FINDINGS} fired before the cap: {fired}"

    # The findings at the poll the cap followed, from the recording of the run through the rules
    rec = read_recording(path)
    health = dataclasses.replace(HealthSettings(), **scenario.health)
    snaps = ReplaySource(rec, health).snapshots()
    caps = [s.gateway.max_concurrency if s.gateway else None for s in snaps]
    first_capped = caps.index(n)
    assert caps[first_capped - 1] == 256
    then = {f.id: f for f in snaps[first_capped - 1].findings}
    # the recorded run showed the same findings there (replay is the live computation)
    assert set(then) == {f["id"] for f in rec.findings(first_capped - 1)}
    assert cap["finding"] in then, (cap, then)
    assert cap["action"] == then[cap["finding"]].action
    assert [int(m) for m in CAP_ADVICE.findall(cap["action"])] == [n], cap["action"]
    # the most severe advice leads: never a warning's cap while a critical advises another
    critical = [
        int(m.group(1))
        for f in then.values()
        if f.severity == "critical" and (m := CAP_ADVICE.search(f.action))
    ]
    if critical:
        assert n in critical

    figures = [e for e in events if e["kind"] == "figures"]
    before = [f for f in figures if 6 < f["t"] < cap["t"]]
    after = [f for f in figures if f["t"] >= cap["t"] + 10]
    assert before
    assert after, f"no figures 10 s after the cap: {figures}"
    assert max(f["waiting"] or 0 for f in before) > 0
    for f in after:
        assert f["gateway_max_concurrency"] == n
        # at most the cap inside the engine; the excess waits in the gateway
        assert (f["running"] or 0) + (f["waiting"] or 0) <= n, f
        assert (f["gateway_queued"] or 0) > (f["waiting"] or 0), f
    assert after[-1]["ttft_p95_s"] is not None
    assert after[-1]["ttft_p95_s"] < HealthSettings().slo.ttft_s
    assert any(cleared.get(f, 0) > cap["t"] for f in story), (cleared, cap)
    # the cap is one that leaves room (kv_target_frac): every story finding that fired before
    # it clears after it, not only one (at the exact quotient kv-exhausted never cleared)
    assert all(cleared.get(f, 0) > cap["t"] for f in story), (cleared, cap)
    assert doc["load"]["errors"] == 0
    assert doc["load"]["ok"] > 0
    assert port_free(doc["sim_url"])
    assert port_free(doc["gateway_url"])


def test_parse_cap() -> None:
    quick = get_scenario("quick")
    assert parse_cap("8@60", quick) == (8, 60.0)
    assert parse_cap("8", quick) == (8, quick.cap_at_s)
    assert parse_cap("auto@60", quick) == (None, 60.0)
    assert parse_cap("auto", quick) == (None, quick.cap_at_s)
    assert describe_cap((None, 60.0)) == "at 60 s, the cap the active finding suggests"
    assert describe_cap((8, 60.0)) == "cap 8 at 60 s"
    for bad in ("x@1", "0@5", "8@-1", "8@soon", "auto@soon", "automatic@5"):
        with pytest.raises(UsageError):
            parse_cap(bad, quick)
    with pytest.raises(UsageError, match="no cap time"):
        parse_cap("8", get_scenario("steady"))


def test_bad_usage_is_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llmtop", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--headless" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "llmtop", "demo", "--scenario", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    help_out = subprocess.run(
        [sys.executable, "-m", "llmtop", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for name in ("story", "quick", "cliff", "long-prompts", "steady"):
        assert f"  {name} " in help_out.stdout


def test_stack_and_load_thread_stop_cleanly() -> None:
    """What `q` does: the load thread, the gateway and the sim stop; both ports are free, and
    the gateway's history (kept for the console's past) goes with its temporary folder."""
    import json
    import os
    import threading
    import time

    import httpx

    from llmtop.demo.stack import LoadThread, start_stack
    from llmtop.settings import HealthSettings

    before = {t.name for t in threading.enumerate()}
    stack = start_stack(get_scenario("quick"), HealthSettings())
    try:
        assert stack.engine_max_num_seqs == 256  # the gateway starts with no real cap
        load = LoadThread(stack.scenario, stack.gateway.url).start()

        def offered() -> int:  # requests the gateway has seen from the load thread
            return int(httpx.get(f"{stack.gateway.url}/admin/stats").json()["offered"])

        deadline = time.monotonic() + 20
        while offered() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert offered() > 0
        history = httpx.get(f"{stack.gateway.url}/admin/history?since=60")
        assert history.status_code == 200  # the demo's console has a past
        head = json.loads(history.text.splitlines()[0])
        assert head["targets"]["gateway"] == stack.gateway.url
        assert stack.history_dir is not None
        assert os.path.isdir(stack.history_dir)
        load.stop()
        assert load.error is None
    finally:
        stack.stop()
    assert port_free(stack.sim.url)
    assert port_free(stack.gateway.url)
    assert not os.path.exists(stack.history_dir)
    left = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not left, left
