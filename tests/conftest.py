"""Shared fixtures: real servers on 127.0.0.1 with free ports, torn down after each test."""

from __future__ import annotations

import inspect
import os
import sys
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

# `pytest` runs on pytest-xdist workers (pyproject.toml: `-n 6 --dist loadgroup`): most of the
# suite waits on sockets, processes and timers, not on a core. Each worker is its own process,
# so every server here binds port 0 and every file goes under tmp_path.


def pytest_configure(config: pytest.Config) -> None:
    """xdist (3.x) hands out the groups largest first by their number of tests unless told
    not to: the order below (longest first by `slow(seconds)`) would be lost, and the
    what-if accuracy test (one test, ~140 s) would start last and be the run's tail."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A module's tests share one worker (its module-scoped servers start once) unless a test
    names its own `xdist_group`; the groups run longest first (`slow(seconds)`), so the longest
    test starts at once rather than last. Runs before xdist reads the groups (tryfirst)."""
    weight: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        named = [m.args[0] for m in item.iter_markers("xdist_group") if m.args]
        if not named:
            named = [item.nodeid.split("::")[0]]
            item.add_marker(pytest.mark.xdist_group(named[0]))
        group = "_".join(sorted(set(named)))  # as xdist joins them
        weight[group] = weight.get(group, 0.0) + _expected_s(item)
        first.setdefault(group, i)
        item.stash[_GROUP] = group
    order = sorted(weight, key=lambda g: (-weight[g], first[g]))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if 0 < workers < len(order):
        # xdist hands each worker a second group at once, queued behind its first: behind the
        # longest one (worker 0's), let that be the lightest group rather than a long one
        order.insert(workers, order.pop())
    rank = {g: i for i, g in enumerate(order)}
    items.sort(key=lambda item: rank[item.stash[_GROUP]])


_GROUP = pytest.StashKey[str]()
PILOT_S = 3.0
TYPICAL_S = {"unit": 0.05, "tui": 0.05}
"""What an unmarked test of tests/<dir> takes, roughly, for the order only: a unit test or a
tui presentation test is milliseconds, a Pilot or snapshot test (async, or `snap_compare`,
in tests/tui) seconds of rendering; the others (real servers) about 1 s."""


def _expected_s(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    if mark is not None:
        return float(mark.args[0]) if mark.args else 10.0
    area = item.nodeid.split("/")[1]
    renders = "snap_compare" in getattr(item, "fixturenames", ())
    if area == "tui" and (renders or inspect.iscoroutinefunction(getattr(item, "obj", None))):
        return PILOT_S
    return TYPICAL_S.get(area, 1.0)


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
