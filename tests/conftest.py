"""Shared fixtures: real servers on 127.0.0.1 with free ports, torn down after each test."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.paths import FIXTURES

# No per-example deadline: the CI box has 2 shared cores, and a slow example is not a bug.
# HYPOTHESIS_PROFILE=deep runs many more examples, for hunting edge cases by hand.
settings.register_profile("default", deadline=None)
settings.register_profile("deep", deadline=None, max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# -- parallel runs ------------------------------------------------------------------------------
# Bytecode caches on (Python's default) even where PYTHONDONTWRITEBYTECODE is set: otherwise
# each worker rewrites every test module's asserts again (collection 6.8 s -> 2.9 s a worker)
# and each `llmtop` subprocess compiles what it imports again (~0.2 s). Set before the test
# modules are imported and before xdist starts its workers, which inherit the environment.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The gateway's history (on by default) reads each upstream's /metrics every second, which the
# fake upstreams would count as requests: off for `llmtop gateway` here unless a test turns it
# on, and kept under a temporary folder, never in the user's ~/.local/state.
os.environ["LLMTOP_HISTORY"] = "false"
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="llmtop-test-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], True)

# CI runs the suite on pytest-xdist workers (scripts/check: `-n 4 --dist loadgroup`): most of it
# waits on sockets, processes and timers, not on a core. Each worker is its own process, so every
# server here binds port 0 and every file goes under tmp_path. A module's tests stay on one
# worker (below), and the tests that put real servers under real-time load share the group
# "realtime-load", so that two of them never starve each other of the 2 cores. Plain `pytest`
# runs in one process.


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On workers a module's tests share one worker (its module-scoped servers and replays are
    made once, not once a worker: the suite's CPU 2.6x without) unless a test names its own
    `xdist_group`; the groups run longest first (`slow(seconds)`, a typical time otherwise),
    so the what-if accuracy test (~140 s, collected near the end) starts at once, not last."""
    weight: dict[str, float] = {}
    group_of: dict[str, str] = {}
    for item in items:
        named = sorted({m.args[0] for m in item.iter_markers("xdist_group") if m.args})
        if not named:
            named = [item.nodeid.split("::")[0]]
            item.add_marker(pytest.mark.xdist_group(named[0]))
        group = "_".join(named)  # as xdist joins them
        weight[group] = weight.get(group, 0.0) + _expected_s(item)
        group_of[item.nodeid] = group
    items.sort(key=lambda item: -weight[group_of[item.nodeid]])


TYPICAL_S = {"unit": 0.05}
"""An unmarked test's time, for the order only: a unit test milliseconds, the others (real
servers, Pilot, snapshots) about a second."""


def _expected_s(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    if mark is not None:
        return float(mark.args[0]) if mark.args else 10.0
    folder = item.nodeid.split("/")[1] if item.nodeid.count("/") > 1 else ""
    return TYPICAL_S.get(folder, 1.0)


@pytest.fixture
def fixtures_dir() -> Path:
    """tests/fixtures: real vLLM 0.32 captures and captures made from the sim."""
    return FIXTURES


@pytest.fixture
def serve_app() -> Iterator[Callable[[Any], ServerThread]]:
    """Serve any ASGI app on 127.0.0.1:<free port>; stopped at teardown."""
    servers: list[ServerThread] = []

    def start(app: Any) -> ServerThread:
        server = ServerThread(app).start()
        servers.append(server)
        return server

    yield start
    for s in reversed(servers):
        s.stop()


@pytest.fixture
def start_sim(serve_app: Callable[[Any], ServerThread]) -> Callable[..., ServerThread]:
    """Start `llmtop sim` in-process: start_sim(profile="fast", max_num_seqs=8, ...)."""

    def start(**overrides: Any) -> ServerThread:
        from llmtop.settings import SimSettings
        from llmtop.sim.server import create_app

        return serve_app(create_app(SimSettings(port=0, **overrides)))

    return start


@pytest.fixture
def start_gateway(serve_app: Callable[[Any], ServerThread]) -> Callable[..., ServerThread]:
    """Start `llmtop gateway` in-process: start_gateway(upstream_url, max_concurrency=2, ...)."""

    def start(upstream: str, **overrides: Any) -> ServerThread:
        from llmtop.gateway.server.app import create_app
        from llmtop.settings import GatewaySettings

        return serve_app(create_app(GatewaySettings(upstream=upstream, **overrides)))

    return start
