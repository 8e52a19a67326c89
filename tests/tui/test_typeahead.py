"""Keys typed faster than the app handles them (a paste, `tmux send-keys ':cap 2' Enter`, a fast
typist) go where they would have gone typed slowly (docs/tui.md#how-it-works says why not
every route does).

`burst` queues every key before the app handles the first, as the terminal's input reader does
with a burst that arrives in one read, Enter included (a test that waits for the text before
sending Enter would not see it run an empty line). A key that changes nothing visible is
followed by one that does, and the test waits on that: keys act in order, so once it has
acted, so have the keys before it. The limits are read back from a real gateway on 127.0.0.1
(tests/tty does the same in a real terminal).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from textual import events

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import LlmtopApp
from llmtop.tui.screens.confirm import ConfirmScreen
from llmtop.tui.screens.help import HelpScreen
from llmtop.tui.screens.replica import ReplicaScreen
from llmtop.tui.screens.whatif import WhatIfScreen
from llmtop.tui.widgets.commandline import CommandLine
from tests.support import fleet_story
from tests.support.tui import (
    NOWHERE,
    SIZE,
    SilentSource,
    burst,
    feed_of,
    limits_of,
    log_texts,
    make_app,
    paused_of,
    settle,
    until,
)


def line_of(app: LlmtopApp) -> CommandLine:
    return app.screen_stack[0].query_one(CommandLine)


def on_dashboard(app: LlmtopApp) -> bool:
    return app.screen is app.screen_stack[0]


def failures(app: LlmtopApp) -> int:
    """How many `+` have failed so far (the app's gateway is nowhere)."""
    return sum(t.startswith("cap +1 failed") for t in log_texts(app))


async def changes_of(gw: ServerThread) -> list[tuple[str, object, object]]:
    """(field, old, new) of every change the TUI made, in order (the gateway's own log)."""
    async with httpx.AsyncClient() as client:
        r = await client.get(f"{gw.url}/admin/events")
        r.raise_for_status()
        return [(e["field"], e["old"], e["new"]) for e in r.json()["events"]]


async def test_a_command_typed_at_once_goes_into_the_line(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        line = line_of(app)
        burst(app, "colon", "c", "a", "p", "space", "2")
        assert await until(pilot, lambda: line.value == "cap 2"), line.value
        await settle(app, pilot)
        assert line.is_open
        assert on_dashboard(app)  # `p` asked nothing
        limits = await limits_of(gw)
        assert limits["mode"] == "manual"  # `a` toggled nothing
        assert limits["max_concurrency"] == 8
        assert not any("mode" in t for t in log_texts(app))


async def test_a_command_and_enter_at_once_run_it_and_the_next_key_is_a_key(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        line = line_of(app)
        # the whole command in one burst, as `tmux send-keys ':cap 2' Enter +` sends it
        burst(app, "colon", "c", "a", "p", "space", "2", "enter", "plus")
        assert await until(pilot, lambda: "set cap 2 -> 3" in log_texts(app)), log_texts(app)
        await settle(app, pilot)
        assert not line.is_open
        assert not line.display
        assert "set cap 8 -> 2" in log_texts(app)
        assert (await limits_of(gw))["max_concurrency"] == 3
        # nothing lost, nothing run twice
        cap = "max_concurrency"
        assert await changes_of(gw) == [(cap, 8, 2), (cap, 2, 3)]


async def test_a_paste_goes_into_the_line_and_only_enter_runs_it(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        line = line_of(app)
        # `:`, a bracketed paste and Enter in one read of the terminal
        burst(app, "colon")
        app.post_message(events.Paste("cap 4"))
        burst(app, "enter")
        assert await until(pilot, lambda: "set cap 8 -> 4" in log_texts(app)), log_texts(app)
        # a paste with the line closed opens it holding the first line; it runs nothing
        app.post_message(events.Paste(":cap 6\nq\n"))
        burst(app, "plus")  # typed into the line: the paste opened it
        assert await until(pilot, lambda: line.value == "cap 6+"), line.value
        await settle(app, pilot)
        assert line.is_open
        assert app.is_running  # the pasted `q` quit nothing
        assert (await limits_of(gw))["max_concurrency"] == 4
        burst(app, "backspace", "enter")
        assert await until(pilot, lambda: "set cap 4 -> 6" in log_texts(app)), log_texts(app)
        cap = "max_concurrency"
        assert await changes_of(gw) == [(cap, 8, 4), (cap, 4, 6)]


async def test_escape_typed_at_once_discards_and_the_next_key_is_a_key(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        burst(app, "colon", "c", "a", "p", "space", "3", "escape", "plus")
        assert await until(pilot, lambda: "set cap 8 -> 9" in log_texts(app)), log_texts(app)
        await settle(app, pilot)
        assert not line_of(app).is_open
        assert (await limits_of(gw))["max_concurrency"] == 9  # not 3: Escape discarded it
        assert on_dashboard(app)


async def test_p_typed_twice_asks_once(start_gateway: Callable[..., ServerThread]) -> None:
    gw = start_gateway(NOWHERE)
    app = make_app(SilentSource(), admin=AdminClient(gw.url))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        burst(app, "p", "p")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await settle(app, pilot)
        assert len(app.screen_stack) == 2  # one question
        await pilot.press("n")
        assert await until(pilot, lambda: on_dashboard(app))
        await settle(app, pilot)
        assert on_dashboard(app)  # no second question behind the first
        assert await paused_of(gw) is False
        await pilot.press("p")  # answered: `p` asks again
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))


async def test_keys_behind_a_key_that_opens_a_screen_go_to_that_screen() -> None:
    # An empty what-if window: the same screen opens (it says it is collecting), and no
    # prediction (seconds of CPU) runs behind the keys for the app to wait on at exit. What is
    # checked is where the keys go.
    app = make_app(SilentSource(), admin=AdminClient(NOWHERE), whatif=feed_of([]))
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        for opens, screen in (("w", WhatIfScreen), ("question_mark", HelpScreen)):

            def opened(screen: type = screen) -> bool:
                return isinstance(app.screen, screen)

            for closes in ("escape", "q"):  # `q` closes that screen; it does not quit
                # `+` acts on the dashboard only (no gateway here: its failure is logged), so
                # once it has acted the screen had opened and closed again
                def acted(before: int = failures(app)) -> bool:
                    return failures(app) > before

                burst(app, opens, closes, "plus")
                assert await until(pilot, acted), (screen, closes)
                assert len(app.screen_stack) == 1, (screen, closes)
                assert app.is_running
            burst(app, opens)
            assert await until(pilot, opened), screen
            burst(app, "escape")
            assert await until(pilot, lambda: on_dashboard(app))
        burst(app, "colon", "w", "space", "question_mark")  # inside the line they are text
        assert await until(pilot, lambda: line_of(app).value == "w ?"), line_of(app).value
        assert on_dashboard(app)


async def test_replica_keys_at_once_and_colon_from_a_replica_opens_the_line() -> None:
    app = fleet_story.app_at(fleet_story.OVERLOADED_S, admin=AdminClient(NOWHERE))
    snap = fleet_story.at(fleet_story.OVERLOADED_S)
    assert snap.fleet is not None
    second = snap.fleet.replicas[1]
    async with app.run_test(size=(100, 30)) as pilot:
        await app.first_snapshot.wait()
        burst(app, "enter", "down")

        def showing(name: str) -> bool:
            return isinstance(app.screen, ReplicaScreen) and app.screen.replica_name == name

        assert await until(pilot, lambda: showing(second.name))
        screen = app.screen
        # the line lives on the fleet's screen: `:` goes back there and opens it
        burst(app, "colon", "c", "a", "p", "space", "2")
        assert await until(pilot, lambda: line_of(app).value == "cap 2"), line_of(app).value
        assert on_dashboard(app)
        # Escape closes the line at once: the Enter behind it opens the replica again
        burst(app, "escape", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, ReplicaScreen))
        assert not line_of(app).is_open
        assert app.screen is not screen
        burst(app, "escape")
        assert await until(pilot, lambda: on_dashboard(app))
