"""Shared fixtures: real servers on 127.0.0.1 with free ports, torn down after each test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from llmtop.asgi.uvicorn_runner import ServerThread

FIXTURES = Path(__file__).parent / "fixtures"

# No per-example deadline: the CI box has 2 shared cores, and a slow example is not a bug.
# HYPOTHESIS_PROFILE=deep runs many more examples, for hunting edge cases by hand.
settings.register_profile("default", deadline=None)
settings.register_profile("deep", deadline=None, max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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
        from llmtop.gateway.app import create_app
        from llmtop.settings import GatewaySettings

        return serve_app(create_app(GatewaySettings(upstream=upstream, **overrides)))

    return start
