"""The real-terminal tier: the installed `llmtop` in tmux against real `llmtop sim` and
`llmtop gateway` processes on free loopback ports (tests/tty/terminal.py).

The sim and the gateway are shared by a module's tests (the gateway's limits, mode and pause are
put back before each test); every test has its own terminal and TUI. Without tmux (not on PATH
and .ci/install-system-tools could not install it) every test here skips, saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.system_tools import system_binary
from tests.tty.terminal import (
    Server,
    Terminal,
    alive,
    clean_env,
    descendants,
    get_json,
    llmtop_command,
    terminals,
    wait_until,
)

CAP = 8
"""The gateway's cap at the start of each test."""
QUEUE = 128


@pytest.fixture(scope="session")
def tmux() -> str:
    return system_binary("tmux")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A live engine for the key tests (nothing loads it: they read and change limits)."""
    tmp = tmp_path_factory.mktemp("sim")
    server = Server(["sim", "--port", "0", "--profile", "fast"], clean_env(tmp), tmp / "sim.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(sim: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("gateway")
    args = ["gateway", "--vllm", sim.url, "--listen", "127.0.0.1:0"]
    args += ["--max-concurrency", str(CAP), "--max-queue", str(QUEUE)]
    server = Server(args, clean_env(tmp), tmp / "gateway.log")
    yield server
    server.stop()


@dataclass
class Tui:
    """The TUI in its terminal, and the gateway it changes."""

    term: Terminal
    gateway_url: str
    since: float = field(default_factory=time.time)
    """Wall time the test began: the gateway's events after it are this test's."""

    def limits(self) -> dict[str, Any]:
        data: dict[str, Any] = get_json(f"{self.gateway_url}/admin/limits")
        return data

    def paused(self) -> bool:
        return bool(get_json(f"{self.gateway_url}/admin/stats")["paused"])

    def changes(self) -> list[tuple[str, Any, Any]]:
        """(field, old, new) of every change the TUI made since the test began, in order."""
        events = get_json(f"{self.gateway_url}/admin/events")["events"]
        return [
            (e["field"], e["old"], e["new"])
            for e in events
            if e.get("source") == "tui" and e["time"] >= self.since
        ]

    def cap_becomes(self, cap: int) -> None:
        try:
            wait_until(lambda: self.limits()["max_concurrency"] == cap, f"max_concurrency {cap}")
        except AssertionError as e:
            now = self.limits()["max_concurrency"]
            raise AssertionError(f"{e} (it is {now}); the screen:\n{self.term.screen()}") from None

    def quit(self) -> None:
        """`q`: the TUI exits 0, prints nothing after it (no traceback, no warning) and leaves
        no process of its tree behind."""
        assert self.term.exit_status() is None, self.term.screen()
        tree = descendants(self.term.pane_pid())
        assert len(tree) >= 2, tree  # the shell and llmtop
        self.term.send("q")
        try:
            wait_until(lambda: self.term.exit_status() is not None, "llmtop exited after q")
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{self.term.screen()}") from None
        status = self.term.exit_status()
        left = self.term.screen()  # what it printed after leaving the alternate screen
        assert status == 0, f"exit status {status}: {left}"
        assert "Traceback" not in left, left
        assert "Warning" not in left, left
        wait_until(lambda: not alive(tree), f"no process of the TUI's tree left ({tree})")


def reset(gateway_url: str) -> None:
    """The gateway as the module started it: cap, queue, manual, admitting."""
    headers = {"x-llmtop-source": "test"}
    body = {"max_concurrency": CAP, "max_queue": QUEUE, "mode": "manual"}
    httpx.patch(f"{gateway_url}/admin/limits", json=body, headers=headers).raise_for_status()
    httpx.post(f"{gateway_url}/admin/resume", headers=headers).raise_for_status()


@pytest.fixture
def make_terminal(tmux: str, tmp_path: Path) -> Iterator[Callable[[tuple[int, int]], Terminal]]:
    yield from terminals(tmux, tmp_path)


@pytest.fixture
def start_tui(
    sim: Server,
    gateway: Server,
    make_terminal: Callable[[tuple[int, int]], Terminal],
    tmp_path: Path,
) -> Callable[..., Tui]:
    """start_tui(size, *flags, **env): `llmtop` on the module's sim and gateway, once its
    first frame with figures is on screen."""

    def start(size: tuple[int, int], *flags: str, **env: str) -> Tui:
        reset(gateway.url)
        term = make_terminal(size)
        argv: Sequence[str] = [
            *llmtop_command(),
            "--vllm",
            sim.url,
            "--gateway",
            gateway.url,
            "--interval-s",
            "0.5",
            *flags,
        ]
        term.start(argv, clean_env(tmp_path, **env))
        term.wait_for(lambda s: f"/{CAP}" in s and "quit" in s, "the first frame")
        return Tui(term, gateway.url)

    return start
