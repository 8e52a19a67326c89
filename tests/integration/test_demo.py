"""`llmtop demo --headless`: the compressed story end to end in a real process — findings fire
before the cap, clear after it, the gateway's queue holds the excess, and nothing is left behind."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

import pytest

from llmtop.demo.headless import parse_cap
from llmtop.demo.scenarios import get_scenario
from llmtop.errors import UsageError

STORY_FINDINGS = {"kv-exhausted", "degraded-200"}
"""The findings the quick story is about: KV cache full, TTFT over the SLO with 0 errors."""


def port_free(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


@pytest.mark.slow
def test_headless_quick_story_fires_then_clears_after_the_cap() -> None:
    scenario = get_scenario("quick")
    cap_at = scenario.cap_at_s
    assert cap_at is not None
    out = subprocess.run(
        [
            sys.executable, "-m", "llmtop", "demo", "--headless", "--scenario", "quick",
            "--duration", "38", "--apply-cap", f"8@{cap_at:g}", "--json",
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    events = doc["events"]
    fired = {e["id"]: e["t"] for e in events if e["kind"] == "finding_fired"}
    cleared = {e["id"]: e["t"] for e in events if e["kind"] == "finding_cleared"}
    (cap,) = [e for e in events if e["kind"] == "cap_applied"]
    assert cap["max_concurrency"] == 8
    assert cap["t"] >= cap_at
    story = {f for f, t in fired.items() if f in STORY_FINDINGS and t < cap["t"]}
    assert story, f"none of {STORY_FINDINGS} fired before the cap: {fired}"
    for f in story:
        assert f in cleared, f"{f} did not clear after the cap: {events}"
        assert cleared[f] > cap["t"]
    fired_kv = next(e for e in events if e["kind"] == "finding_fired" and e["id"] in story)
    assert ":cap 8" in fired_kv["action"] or "cap" in fired_kv["action"]
    figures = [e for e in events if e["kind"] == "figures"]
    before = [f for f in figures if f["t"] < cap["t"] and f["t"] > 6]
    # Once the story's findings have cleared, the engine holds at most the cap and nothing
    # waits inside it: the waiting room is the gateway's queue.
    recovered = max(cleared[f] for f in story)
    after = [f for f in figures if f["t"] >= recovered]
    assert before
    assert after, f"no figures after {recovered} s: {figures}"
    assert max(f["waiting"] or 0 for f in before) > 0
    assert all(f["gateway_max_concurrency"] == 8 for f in after)
    for f in after:
        # At most the cap inside the engine (a request can sit in vLLM's waiting queue for a
        # step after the gateway admits it); the excess waits in the gateway instead.
        assert (f["running"] or 0) + (f["waiting"] or 0) <= 8, f
        assert (f["gateway_queued"] or 0) > (f["waiting"] or 0), f
    assert doc["load"]["errors"] == 0
    assert doc["load"]["ok"] > 0
    assert port_free(doc["sim_url"])
    assert port_free(doc["gateway_url"])


def test_parse_cap() -> None:
    quick = get_scenario("quick")
    assert parse_cap("8@60", quick) == (8, 60.0)
    assert parse_cap("8", quick) == (8, quick.cap_at_s)
    for bad in ("x@1", "0@5", "8@-1", "8@soon"):
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
    """What `q` does: the load thread, the gateway and the sim stop; both ports are free."""
    import threading
    import time

    from llmtop.demo.stack import LoadThread, start_stack
    from llmtop.settings import HealthSettings

    before = {t.name for t in threading.enumerate()}
    stack = start_stack(get_scenario("quick"), HealthSettings())
    try:
        assert stack.engine_max_num_seqs == 256  # the gateway starts with no real cap
        load = LoadThread(stack.scenario, stack.gateway.url).start()
        deadline = time.monotonic() + 20
        while load.sent == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert load.sent > 0
        load.stop()
        assert load.error is None
    finally:
        stack.stop()
    assert port_free(stack.sim.url)
    assert port_free(stack.gateway.url)
    left = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not left, left
