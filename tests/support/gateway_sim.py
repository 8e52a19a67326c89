"""The gateway in front of `llmtop sim` over real sockets: the sim's engine reached through its
server, what it holds and ever held, waiting on a condition, a streamed completion body, and the
gateway's accounting invariant."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.sim.model import Engine

Start = Callable[..., ServerThread]


def engine_of(server: ServerThread) -> Engine:
    app: Any = server._server.config.app
    engine: Engine = app.state.engine
    return engine


def at_engine(engine: Engine) -> int:
    """Requests the engine holds now, running or waiting."""
    return len(engine.running) + len(engine.waiting)


def reached(engine: Engine) -> int:
    """Requests that ever reached the engine."""
    return sum(engine.stats.finished.values()) + at_engine(engine)


async def wait_for(pred: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def accounted(s: dict[str, Any]) -> None:
    assert s["offered"] == sum(s["outcomes"].values()) + s["in_flight"] + s["queued"]


def body(max_tokens: int, prompt: Any = "hello there", **kw: Any) -> dict[str, Any]:
    return {"model": "llmtop-sim", "prompt": prompt, "max_tokens": max_tokens, "stream": True, **kw}
