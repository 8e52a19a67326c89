"""The app's parts, each in a small App of its own (not LlmtopApp): the key router, the
gateway's controls against a real gateway on 127.0.0.1, the what-if controls on a what-if
source whose window is still empty, and a fleet's replica navigation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.base.snapshot import Snapshot
from llmtop.settings import HealthSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.controls import AdminControls
from llmtop.tui.keys import KeyRouter
from llmtop.tui.replica_nav import ReplicaNavigator
from llmtop.tui.view.present import LogEvent
from llmtop.tui.whatif_controls import WhatIfControls, WhatIfPreview
from llmtop.tui.widgets.commandline import CommandLine
from llmtop.tui.widgets.header import StatusHeader
from llmtop.whatif.feed import SnapshotsWithWhatIf, WhatIfFeed
from tests.support import fleet_story, story
from tests.support.tui import SilentSource, burst, limits_of, notes, until

NOWHERE = "http://127.0.0.1:9"


class Question(ModalScreen[None]):
    """A screen a key opens: its own `y` binding, to see the keys behind it arrive there."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("y", "yes", "yes")]

    def __init__(self, answers: list[str]) -> None:
        super().__init__()
        self.answers = answers

    def compose(self) -> ComposeResult:
        yield Static("?")

    def action_yes(self) -> None:
        self.answers.append("yes")
        self.dismiss(None)


class Routed(App[None]):
    """A dashboard with a command line, `+`, `:` and `?`, its keys through a KeyRouter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("plus", "plus", "plus"),
        Binding("colon", "open", "cmd"),
        Binding("question_mark", "ask", "ask"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.done: list[str] = []
        self.router = KeyRouter(
            self, open_line=self.action_open, run_line=self._run, close_line=self._close
        )

    def compose(self) -> ComposeResult:
        yield CommandLine(id="cmdline")

    async def on_event(self, event: Any) -> None:
        if not await self.router.take(event):
            await super().on_event(event)

    def line(self) -> CommandLine:
        return self.screen_stack[0].query_one(CommandLine)

    def action_open(self) -> None:
        self.line().open()

    def _run(self) -> None:
        self.done.append(f"run {self.line().value}")
        self.line().close()

    def _close(self) -> None:
        self.done.append("closed")
        self.line().close()

    def action_plus(self) -> None:
        self.done.append("+")

    def action_ask(self) -> None:
        self.push_screen(Question(self.done))


async def test_the_router_acts_on_a_burst_in_the_order_it_was_typed() -> None:
    app = Routed()
    async with app.run_test() as pilot:
        burst(app, "colon", "c", "a", "p", "space", "3", "enter", "plus")
        assert await until(pilot, lambda: app.done == ["run cap 3", "+"]), app.done
        burst(app, "colon", "plus", "escape", "plus")  # `+` inside the line is text
        assert await until(pilot, lambda: app.done[-2:] == ["closed", "+"]), app.done
        # the key behind one that opens a screen acts on that screen, then the dashboard's
        burst(app, "question_mark", "y", "plus")
        assert await until(pilot, lambda: app.done[-2:] == ["yes", "+"]), app.done
        assert app.screen is app.screen_stack[0]


async def test_a_paste_opens_the_line_holding_it_and_does_not_run_it() -> None:
    from textual import events

    app = Routed()
    async with app.run_test() as pilot:
        app.post_message(events.Paste(":cap 5\nqueue 9\n"))
        assert await until(pilot, lambda: app.line().is_open and app.line().value == "cap 5")
        assert not [d for d in app.done if d.startswith("run")]
        burst(app, "enter")
        assert await until(pilot, lambda: "run cap 5" in app.done), app.done


class Controlled(App[None]):
    """The dashboard parts the controls touch (line, footer, header) and what they report."""

    def __init__(self, admin: AdminClient | None, *, read_only: bool = False) -> None:
        super().__init__()
        self.logged: list[LogEvent] = []
        self.changes = 0
        self.closed = 0
        self.controls = AdminControls(
            self,
            admin,
            read_only=read_only,
            recorder=None,
            log=self.logged.append,
            changed=self._changed,
            line_closed=self._line_closed,
        )

    def compose(self) -> ComposeResult:
        yield StatusHeader()
        yield CommandLine(id="cmdline")
        yield Footer()

    async def on_unmount(self) -> None:
        if self.controls.admin is not None:
            await self.controls.admin.aclose()

    def _changed(self) -> None:
        self.changes += 1

    def _line_closed(self) -> None:
        self.closed += 1


def admin_idle(app: App[Any]) -> Callable[[], bool]:
    return lambda: not any(w.group == "admin" and not w.is_finished for w in app.workers)


async def test_the_controls_change_the_real_gateway_and_report_it(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8, max_queue=128)
    app = Controlled(AdminClient(gw.url))
    async with app.run_test() as pilot:
        app.controls.cap(1)
        assert await until(pilot, lambda: app.changes == 1)
        assert await until(pilot, admin_idle(app))
        assert (await limits_of(gw))["max_concurrency"] == 9
        assert [e.text for e in app.logged] == ["set cap 8 -> 9"]
        app.controls.open_line()
        line = app.query_one(CommandLine)
        assert line.is_open
        assert not app.query_one(Footer).display  # its keys are text while typing
        line.paste("queue 32")
        app.controls.run_line()
        assert not line.is_open
        assert app.query_one(Footer).display
        assert app.closed == 1
        assert await until(pilot, lambda: app.changes == 2)
        assert await until(pilot, admin_idle(app))
        assert (await limits_of(gw))["max_queue"] == 32
        app.controls.run_command("cap lots")
        assert app.logged[-1].kind == "error"
        assert app.logged[-1].text.startswith(":cap lots failed")


async def test_the_controls_show_a_change_made_here_over_an_older_poll(
    start_gateway: Callable[..., ServerThread],
) -> None:
    gw = start_gateway(NOWHERE, max_concurrency=8)
    app = Controlled(AdminClient(gw.url))
    before = story.upto(story.MOMENTS["after-cap"])[-1]  # a poll read long before the change
    assert before.gateway is not None
    assert app.controls.with_changes_here(before) is before  # nothing changed here yet
    async with app.run_test() as pilot:
        app.controls.run_command("cap 3")
        assert await until(pilot, lambda: app.changes == 1)
        shown = app.controls.with_changes_here(before)
        assert shown.gateway is not None
        assert shown.gateway.max_concurrency == 3
        assert before.gateway.max_concurrency != 3


async def test_read_only_and_no_gateway_say_why_and_send_nothing() -> None:
    for app, said in (
        (Controlled(AdminClient(NOWHERE), read_only=True), "read-only: cap +1 is disabled"),
        (Controlled(None), "cap +1: no gateway configured (--gateway URL)"),
    ):
        async with app.run_test() as pilot:
            app.controls.cap(1)
            app.controls.open_line()
            await pilot.pause()
            assert said in notes(app)
            assert not app.query_one(CommandLine).is_open
            assert not list(app.workers)
            assert app.logged == []


class WhatIfShown(App[None]):
    """A command line and the what-if controls on a source whose window is empty."""

    def __init__(self, feed: WhatIfFeed | None) -> None:
        super().__init__()
        source = None if feed is None else SnapshotsWithWhatIf(SilentSource(), feed)
        self.whatif = WhatIfControls(self, source, lambda: (4, 8))

    def compose(self) -> ComposeResult:
        yield CommandLine(id="cmdline")

    def on_input_changed(self, event: Any) -> None:
        self.whatif.line_changed(event.input)


async def test_the_preview_says_what_the_window_needs_and_goes_with_the_line() -> None:
    feed = WhatIfFeed(NOWHERE, None, None, HealthSettings(), live=False)
    app = WhatIfShown(feed)
    async with app.run_test() as pilot:
        line = app.query_one(CommandLine)
        line.open()
        line.paste("cap 6")
        assert await until(pilot, lambda: bool(app.query(WhatIfPreview)))
        preview = app.query_one(WhatIfPreview)

        def says(text: str) -> Callable[[], bool]:
            return lambda: text in str(preview.render())

        assert await until(pilot, says("what-if: collecting metrics (0 s of 30)"))
        assert preview.display
        line.paste(" queue")  # no longer a cap: nothing to predict
        assert await until(pilot, lambda: not preview.display)
        line.value = "cap 7"
        assert await until(pilot, says("collecting metrics"))
        app.whatif.hide_preview()
        assert not preview.display
        assert not [w for w in app.workers if w.group == "whatif-preview" and w.is_running]


async def test_without_a_what_if_source_w_says_so_and_the_line_shows_nothing() -> None:
    app = WhatIfShown(None)
    async with app.run_test() as pilot:
        app.whatif.open_screen()
        line = app.query_one(CommandLine)
        line.open()
        line.paste("cap 6")
        await pilot.pause()
        assert "what-if needs a live engine (not a replay)" in notes(app)
        assert app.screen is app.screen_stack[0]
        assert not app.query(WhatIfPreview)


def test_the_navigator_moves_within_the_fleet_and_only_for_a_fleet() -> None:
    snap = fleet_story.at(fleet_story.OVERLOADED_S)
    assert snap.fleet is not None
    keys = [r.key for r in snap.fleet.replicas]
    redraws: list[None] = []
    nav = ReplicaNavigator(App(), lambda: snap, lambda: redraws.append(None))
    assert nav.allows("select_replica")
    assert nav.allows("open_replica")
    assert nav.allows("quit")
    nav.select(1)
    assert nav.selected == keys[1]
    nav.select(100)
    assert nav.selected == keys[-1]
    nav.select(-100)
    assert nav.selected == keys[0]
    assert len(redraws) == 3
    single = story.upto(story.MOMENTS["healthy"])[-1]
    alone = ReplicaNavigator(App(), lambda: single, lambda: redraws.append(None))
    assert not alone.allows("select_replica")
    assert not alone.allows("open_replica")
    alone.select(1)
    assert alone.selected is None
    assert len(redraws) == 3


class OneSnapshot:
    """Answers one recorded poll, and says whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def poll(self) -> Snapshot:
        return story.upto(story.MOMENTS["healthy"])[-1]

    async def aclose(self) -> None:
        self.closed = True


async def test_the_live_source_polls_predicts_and_closes_both() -> None:
    from llmtop.errors import UsageError
    from llmtop.settings import MonitorSettings
    from llmtop.tui.view.source import WhatIfSource
    from llmtop.whatif.feed import with_whatif

    snapshots = OneSnapshot()
    live = with_whatif(snapshots, MonitorSettings(vllm_urls=(NOWHERE,)), HealthSettings())
    assert isinstance(live, SnapshotsWithWhatIf)
    assert isinstance(live, WhatIfSource)
    assert (await live.poll()) == await snapshots.poll()
    live.feed.live = False  # no scrape of NOWHERE: the window stays empty
    with pytest.raises(UsageError, match=r"collecting metrics \(0 s of 30\)"):
        await live.analyse((4,))
    await live.aclose()
    assert snapshots.closed
    alone = OneSnapshot()
    assert with_whatif(alone, MonitorSettings(vllm_urls=()), HealthSettings()) is alone
    assert not isinstance(alone, WhatIfSource)  # a replay's kind of source: no what-if
