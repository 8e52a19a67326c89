"""A real `llmtop gateway --autopilot` process in front of a real `llmtop sim --dialect` process
(SGLang, TensorRT-LLM, llama.cpp), overloaded by a real `llmtop load` for a few seconds: the
autopilot names the engine it reads and how (SGLang's token pool, TensorRT-LLM's KV cache,
llama.cpp's slots, as its /props says, and the TTFT the gateway measures), and moves its limit
past the start, never "holding" for a figure the engine does not export (issue 44 item 4).

Every wait is on a condition with a deadline; the load is bounded in count and time."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.terminal import Server, clean_env, get_json, llmtop_command, wait_until

pytestmark = [pytest.mark.xdist_group("realtime-load"), pytest.mark.slow(6)]

LOAD = ("--concurrency", "16", "--requests", "400", "--duration-s", "20")
"""Sixteen streams at once (bounded at 400 requests and 20 s, stopped at the move): 400 + 100
tokens a request, eight fit in the fast profile's 4,096 KV tokens, two in llama.cpp's two slots;
the rest wait in the gateway."""
SHAPE = ("--prompt-tokens", "400", "--output-tokens", "100")


@dataclass(frozen=True)
class Case:
    dialect: str
    sim_flags: tuple[str, ...]
    reads: tuple[str, ...]
    """What `autopilot.reads` says of how it reads this engine."""
    moved: Callable[[dict[str, Any]], bool]
    """An autopilot event that is a move past the start, in this engine's mode."""


def kv_move(e: dict[str, Any]) -> bool:
    """The KV budget moved from a budget it had (the start sets it from none)."""
    return bool(e["field"] == "max_inflight_kv_blocks" and e["old"] is not None)


def slots_move(e: dict[str, Any]) -> bool:
    """The cap moved to the engine's two slots."""
    return bool(e["field"] == "max_concurrency" and e["new"] == 2)


CASES = [
    Case("sglang", (), ("SGLang's token pool", "sglang:token_usage", "sglang:max_total_num_tokens"),
         kv_move),
    Case("trtllm", (), ("TensorRT-LLM's KV cache", "trtllm_kv_cache_utilization",
                        "no preemption count", "trouble read from TTFT and ITL"), kv_move),
    Case("llamacpp", ("--max-num-seqs", "2"),
         ("llama.cpp's slots", "llamacpp:requests_deferred", "the TTFT the gateway measures",
          "no KV usage"), slots_move),
]  # fmt: skip


@dataclass
class Stack:
    sim: Server
    gateway: Server


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    case: Case = request.param
    env = clean_env(tmp_path)
    sim_args = ["sim", "--profile", "fast", "--port", "0", "--dialect", case.dialect]
    sim = Server([*sim_args, *case.sim_flags], env, tmp_path / "sim.log")
    gateway: Server | None = None
    try:
        gw_args = ["gateway", "--engine", sim.url, "--listen", "127.0.0.1:0", "--autopilot"]
        quick_stop = ("--drain-grace-s", "0", "--drain-timeout-s", "1")
        gateway = Server([*gw_args, "--no-history", *quick_stop], env, tmp_path / "gw.log")
        yield Stack(sim, gateway)
    finally:
        for server in (gateway, sim):
            if server is not None:
                server.stop()
    for log in ("sim.log", "gw.log"):
        assert "Traceback" not in (tmp_path / log).read_text(errors="replace"), log


def autopilot_of(url: str) -> dict[str, Any]:
    """/admin/stats' autopilot part; empty before its first tick."""
    doc: dict[str, Any] = get_json(url + "/admin/stats").get("autopilot") or {}
    return doc


def moves(url: str, moved: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    events = get_json(url + "/admin/events")["events"]
    return [e for e in events if e["source"] == "autopilot" and moved(e)]


@pytest.mark.parametrize("stack", CASES, ids=[c.dialect for c in CASES], indirect=True)
def test_the_autopilot_reads_and_moves_in_front_of_each_dialect(
    stack: Stack, request: pytest.FixtureRequest
) -> None:
    case: Case = request.node.callspec.params["stack"]
    gw = stack.gateway.url
    first = wait_until(
        lambda: (a := autopilot_of(gw)).get("engine") is not None and a, "the engine read", 15
    )
    assert first["engine"] == case.dialect  # the kind, as the dialect was detected
    for words in case.reads:
        assert words in first["reads"], first["reads"]
    assert "unreadable" not in first["reason"]
    load = subprocess.Popen(  # stopped at the move: the overload lasts only as long as needed
        [*llmtop_command(), "load", "--url", gw, *LOAD, *SHAPE, "--seed", "3"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        moved = wait_until(lambda: moves(gw, case.moved), "the autopilot moved past its start", 20)
    finally:
        load.terminate()
        _, err = load.communicate(timeout=10)
    assert "Traceback" not in err
    s = get_json(gw + "/admin/stats")
    pilot = s["autopilot"]
    assert pilot["engine"] == case.dialect
    assert not pilot["reason"].startswith("holding at")  # not stuck waiting for a figure
    assert "unknown" not in pilot["reason"]
    if case.moved is slots_move:  # no KV figure: the cap follows the slots and measured TTFT
        (cap,) = moved
        assert "admits by llama.cpp's 2 slots as its info endpoint says" in cap["reason"]
        assert "measured here" in cap["reason"]
        assert s["limits"]["max_concurrency"] == 2
        assert s["limits"]["max_inflight_kv_blocks"] is None
        assert pilot["capacity_blocks"] is None
    else:  # the KV budget from the engine's own pool, moved off the cache it started at
        cap_blocks = pilot["capacity_blocks"]
        assert cap_blocks == (4096 if case.dialect == "sglang" else 256)  # tokens / 16-blocks
        start = [e for e in get_json(gw + "/admin/events")["events"] if e["old"] is None]
        assert any("read from " + case.reads[0] in e["reason"] for e in start), start
        assert moved[0]["new"] != cap_blocks
        assert s["limits"]["max_concurrency"] == 1024  # the budget admits, the cap is a ceiling
    after = httpx.post(  # at the moved limit, a request is still served
        gw + "/v1/completions",
        json={"model": "llmtop-sim", "prompt": "hi", "max_tokens": 4},
        timeout=30,
    )
    assert after.status_code == 200, after.text
    assert s["outcomes"]["upstream_error"] == 0
    assert s["offered"] == sum(s["outcomes"].values()) + s["in_flight"] + s["queued"]
