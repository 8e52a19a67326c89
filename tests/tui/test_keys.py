"""Keys -> admin API calls on a real gateway on 127.0.0.1, at 80x24; read-only; failures shown."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.sources.gateway import AdminClient
from llmtop.tui.screens.confirm import ConfirmScreen
from llmtop.tui.view.commands import QUEUE_STEP
from llmtop.tui.widgets.commandline import CommandLine
from tests.support.tui import (
    NOWHERE,
    SIZE,
    SilentSource,
    limits_of,
    log_texts,
    make_app,
    notes,
    paused_of,
    settle,
)


async def test_plus_minus_and_brackets_change_the_real_gateway(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8, max_queue=128)
    # a source that never answers: the screen runs on the preloaded story, keys still work
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("plus", "plus")
        await settle(app, pilot)
        assert (await limits_of(gw))["max_concurrency"] == 10
        await pilot.press("minus")
        await settle(app, pilot)
        assert (await limits_of(gw))["max_concurrency"] == 9
        await pilot.press("right_square_bracket")
        await settle(app, pilot)
        await pilot.press("left_square_bracket", "left_square_bracket")
        await settle(app, pilot)
        assert (await limits_of(gw))["max_queue"] == 128 - QUEUE_STEP
        assert "set cap 8 -> 9" in log_texts(app)
        # the panel shows the new limit before the next poll
        gateway = app.snapshot.gateway if app.snapshot else None
        assert gateway is not None
        assert gateway.max_queue == 128 - QUEUE_STEP


async def test_command_line_sets_exact_values(start_gateway: Callable[..., ServerThread]) -> None:
    gw = start_gateway(NOWHERE)
    app = make_app(admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        for command in ("cap 3", "queue 64", "timeout 20", "rpm 600"):
            await pilot.press("colon")
            assert app.query_one(CommandLine).has_focus
            await pilot.press(*command, "enter")
            await settle(app, pilot)
        limits = await limits_of(gw)
        assert (limits["max_concurrency"], limits["max_queue"]) == (3, 64)
        assert (limits["queue_timeout_s"], limits["rate_limit_rpm"]) == (20, 600)
        await pilot.press("colon", *"rpm off", "enter")
        await settle(app, pilot)
        assert (await limits_of(gw))["rate_limit_rpm"] is None
        # after the command line closes, single keys are keys again
        await pilot.press("plus")
        await settle(app, pilot)
        assert (await limits_of(gw))["max_concurrency"] == 4


async def test_bad_command_and_rejected_value_are_shown(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("colon", *"cap lots", "enter")
        await settle(app, pilot)
        assert any("expected a whole number" in n for n in notes(app))
        await pilot.press("colon", *"cap 0", "enter")
        await settle(app, pilot)
        shown = " ".join(notes(app) + log_texts(app))
        assert "rejected the change (400)" in shown
        assert "max_concurrency" in shown
        assert (await limits_of(gw))["max_concurrency"] == 8


async def test_pause_asks_then_pauses_and_resumes(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE)
    app = make_app(admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("p")
        await settle(app, pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(app, pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert await paused_of(gw) is False
        await pilot.press("p")
        await settle(app, pilot)
        await pilot.press("y")
        await settle(app, pilot)
        assert await paused_of(gw) is True
        assert "admission PAUSED" in log_texts(app)
        await pilot.press("p")
        await settle(app, pilot)
        assert "Resume" in app.screen.query_one("#question").render().plain
        await pilot.press("y")
        await settle(app, pilot)
        assert await paused_of(gw) is False


async def test_read_only_blocks_every_change(start_gateway: Callable[..., ServerThread]) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8, max_queue=128)
    app = make_app(admin=AdminClient(gw.url), read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("plus", "minus", "right_square_bracket", "left_square_bracket")
        await pilot.press("colon", "p")
        await settle(app, pilot)
        assert not app.query_one(CommandLine).display
        assert not isinstance(app.screen, ConfirmScreen)
        assert len([n for n in notes(app) if n.startswith("read-only")]) >= 5
    limits = await limits_of(gw)
    assert (limits["max_concurrency"], limits["max_queue"]) == (8, 128)
    assert await paused_of(gw) is False


async def test_gateway_down_is_shown_not_swallowed() -> None:
    app = make_app(admin=AdminClient(NOWHERE))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("plus")
        await settle(app, pilot)
        assert any("not answering" in n for n in notes(app))
        assert any(t.startswith("cap +1 failed:") for t in log_texts(app))


async def test_wrong_token_is_shown(start_gateway: Callable[..., ServerThread]) -> None:
    gw = start_gateway(NOWHERE, admin_token="right-token", max_concurrency=8)
    app = make_app(admin=AdminClient(gw.url, "wrong-token"))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("plus")
        await settle(app, pilot)
        shown = " ".join(notes(app))
        assert "401" in shown
        assert "wrong-token" not in shown
    async with httpx.AsyncClient() as client:
        r = await client.get(
            f"{gw.url}/admin/limits", headers={"authorization": "Bearer right-token"}
        )
    assert r.json()["max_concurrency"] == 8


async def test_no_gateway_configured_says_so() -> None:
    app = make_app(admin=None)
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("plus")
        await pilot.pause()
        assert any("no gateway configured" in n for n in notes(app))


async def test_help_screen_and_record_stub() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert type(app.screen).__name__ == "Screen"
        await pilot.press("r")
        await pilot.pause()
        assert any("recording not available" in n for n in notes(app))


class FakeRecorder:
    def __init__(self) -> None:
        self.on = False

    def toggle(self) -> bool:
        self.on = not self.on
        return self.on


async def test_record_key_toggles_the_recorder() -> None:
    rec = FakeRecorder()
    app = make_app(recorder=rec)
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("r")
        await pilot.pause()
        assert rec.on
        assert "REC" in app.query_one("#header").render().plain  # type: ignore[union-attr]
        await pilot.press("r")
        assert not rec.on


async def test_q_quits() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_a_toggles_the_autopilot_on_the_real_gateway(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("a")
        await settle(app, pilot)
        assert (await limits_of(gw))["mode"] == "auto"
        assert "set mode manual -> auto" in log_texts(app)
        await pilot.press("a")
        await settle(app, pilot)
        assert (await limits_of(gw))["mode"] == "manual"
