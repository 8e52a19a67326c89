"""The real-terminal tier: the installed `llmtop` in tmux against real `llmtop sim` and
`llmtop gateway` processes on free loopback ports (harness/terminal.py).

The sim and the gateway are shared by a module's tests (the gateway's limits, mode and pause are
put back before each test); every test has its own terminal and TUI. Without tmux (not on PATH
and .ci/install-system-tools could not install it) every test here skips, saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from harness.system_tools import system_binary
from harness.terminal import (
    Server,
    Terminal,
    clean_env,
    llmtop_command,
    terminals,
)
from tests.support.tty import CAP, QUEUE, Tui, reset


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
