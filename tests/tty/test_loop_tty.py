"""The whole loop in a real terminal: a load fills a small KV cache, the TUI names it, the person
types the cap the finding suggests (`:cap N` and Enter in one write), the engine's queue moves
to the gateway and the findings clear. A real sim (the `quick` demo's small KV cache), a real
gateway with a cap wide open, a real `llmtop load`; health windows as short as the demo's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.terminal import (
    Process,
    Server,
    Terminal,
    clean_env,
    engine_waiting,
    get_json,
    llmtop_command,
    wait_until,
)
from llmtop.demo.scenarios import get_scenario
from tests.support.tty import Tui

# one worker for the module: its tests share the module's sim and gateway
pytestmark = [pytest.mark.tty, pytest.mark.xdist_group("tty-loop")]

QUICK = get_scenario("quick")
"""The demo's story compressed for CI: its sim and its health windows."""
CLIENTS = 16
"""Closed-loop clients: about twice what the cache holds, so some wait in the engine."""
PROMPT, OUTPUT = 1800, 128


@pytest.fixture(scope="module")
def kv_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("kv-sim")
    args = ["sim", "--port", "0", "--profile", str(QUICK.sim["profile"])]
    args += ["--kv-tokens", str(QUICK.sim["kv_tokens"])]
    server = Server(args, clean_env(tmp), tmp / "sim.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def open_gateway(kv_sim: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A cap wide open: everything the clients send reaches the engine."""
    tmp = tmp_path_factory.mktemp("open-gateway")
    args = ["gateway", "--vllm", kv_sim.url, "--listen", "127.0.0.1:0"]
    server = Server([*args, "--max-concurrency", "64"], clean_env(tmp), tmp / "gateway.log")
    yield server
    server.stop()


@pytest.fixture
def load(open_gateway: Server, tmp_path: Path) -> Iterator[None]:
    """`llmtop load` through the gateway, bounded in time and count; stopped at the end."""
    args = ["load", "--url", open_gateway.url, "--concurrency", str(CLIENTS)]
    args += ["--prompt-tokens", str(PROMPT), "--output-tokens", str(OUTPUT)]
    args += ["--duration-s", "90", "--requests", "3000"]
    runner = Process(args, clean_env(tmp_path), tmp_path / "load.log")
    yield
    runner.stop()


def findings_panel(screen: str) -> str:
    """The lines of the Findings panel (up to the next panel's top border)."""
    lines = screen.splitlines()
    start = next((i for i, line in enumerate(lines) if "─Findings" in line), None)
    if start is None:
        return ""  # not drawn yet
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("─")), None)
    return "\n".join(lines[start + 1 : end])


def test_the_kv_finding_then_the_cap_it_suggests_moves_the_queue_and_clears_it(
    kv_sim: Server,
    open_gateway: Server,
    make_terminal: Callable[[tuple[int, int]], Terminal],
    tmp_path: Path,
    load: None,
) -> None:
    term = make_terminal((120, 36))
    health = {f"LLMTOP_{k.upper()}": str(v) for k, v in QUICK.health.items()}
    argv = [*llmtop_command(), "--vllm", kv_sim.url, "--gateway", open_gateway.url]
    term.start([*argv, "--interval-s", "0.5"], clean_env(tmp_path, **health))
    tui = Tui(term, open_gateway.url)
    # the KV finding, and the cap it suggests, read off the screen as the person reads it
    screen = term.wait_for(
        lambda s: "kv-exhausted" in findings_panel(s) and ":cap " in findings_panel(s),
        "the kv-exhausted finding and its :cap",
    )
    found = re.search(r":cap (\d+)", findings_panel(screen).replace("\n", " "))
    assert found, findings_panel(screen)
    cap = int(found.group(1))
    assert 1 <= cap < CLIENTS
    assert engine_waiting(kv_sim.url) > 0  # the queue is in the engine, the gateway's is empty
    assert get_json(f"{open_gateway.url}/admin/stats")["queued"] == 0
    # the core gesture, at the speed of a paste
    term.send(f":cap {cap}", "Enter")
    tui.cap_becomes(cap)

    def queue_moved() -> bool:
        queued = get_json(f"{open_gateway.url}/admin/stats")["queued"]
        return bool(queued >= CLIENTS - cap - 1 and engine_waiting(kv_sim.url) < queued)

    wait_until(queue_moved, "the excess waits in the gateway, not in the engine")
    screen = term.wait_for("cleared kv-exhausted", "kv-exhausted cleared (the event log)")
    term.wait_for(
        lambda s: "none: serving within SLO" in findings_panel(s),
        "every finding cleared",
    )
    assert tui.changes() == [("max_concurrency", 64, cap)]
    tui.quit()
