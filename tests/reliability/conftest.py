"""Fixtures of the fault suite: a gateway whose loop the test can see, fault upstreams that are
always closed, and the figures (faults survived, inputs tried, requests lost) at the end."""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.faults import FIGURES, Fault, FaultUpstream, Gateway, LoopProbe


@pytest.fixture
def gateway(serve_app: Callable[[Any], ServerThread]) -> Callable[..., Gateway]:
    """gateway(upstream_url, **GatewaySettings fields) -> a running, probed gateway."""

    def start(upstream: str, **overrides: Any) -> Gateway:
        from llmtop.gateway.server.app import create_app
        from llmtop.settings import GatewaySettings

        probe = LoopProbe(create_app(GatewaySettings(upstream=upstream, **overrides)))
        return Gateway(serve_app(probe), probe)

    return start


@pytest.fixture
def fault_upstream() -> Iterator[Callable[..., FaultUpstream]]:
    """fault_upstream(fault, answer_health=True) -> a raw upstream misbehaving as told;
    closed at teardown."""
    made: list[FaultUpstream] = []

    def make(fault: Fault, *, answer_health: bool = True) -> FaultUpstream:
        up = FaultUpstream(fault, answer_health=answer_health)
        made.append(up)
        return up

    yield make
    for up in made:
        up.close()


@pytest.fixture
def many_files() -> Iterator[int]:
    """Raise the soft open-files limit to the hard limit for the test (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.write_line(
            "reliability: {faults} faults survived, {inputs} inputs tried, "
            "{requests} requests sent, {lost} lost".format(
                **{k: FIGURES[k] for k in ("faults", "inputs", "requests", "lost")}
            )
        )
