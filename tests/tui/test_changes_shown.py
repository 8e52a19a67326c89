"""A poll that began before a change made here was answered read the gateway before it: the
screen keeps the state the change left, and the event log does not say the limit went back
(`limits: cap 9 -> 8`) and forward again at the next poll. A real gateway on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.snapshot import Snapshot
from llmtop.sources.gateway import AdminClient
from tests.support.tui import NOWHERE, SIZE, SilentSource, log_texts, make_app, settle


def polled(snap: Snapshot, at: float, cap: int) -> Snapshot:
    """`snap` as a poll begun at wall time `at` that read `cap` from the gateway."""
    assert snap.gateway is not None
    return replace(snap, time=at, gateway=replace(snap.gateway, max_concurrency=cap))


async def test_a_poll_from_before_a_change_shows_what_the_change_left(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        begun = time.time()  # a poll in flight while the change is made
        await pilot.press("plus")
        await settle(app, pilot)
        assert "set cap 8 -> 9" in log_texts(app)
        shown = app.snapshot  # the gateway's limits as the change left them
        assert shown is not None
        app.feed(polled(shown, begun, 8))
        assert app.snapshot is not None
        assert app.snapshot.gateway is not None
        assert app.snapshot.gateway.max_concurrency == 9
        app.feed(polled(shown, time.time(), 9))  # the first poll begun after it
        assert not [t for t in log_texts(app) if t.startswith("limits:")], log_texts(app)
        # a change made elsewhere afterwards is logged as before
        app.feed(polled(shown, time.time() + 1, 12))
        assert "limits: cap 9 -> 12" in log_texts(app)
