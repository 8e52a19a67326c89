"""The demo's line on top reads the active finding's cap at every poll (replayed demo story)."""

from __future__ import annotations

import asyncio
import re

from llmtop.core.base.snapshot import Snapshot
from llmtop.core.health.rulebase import suggested_cap
from llmtop.tui.demo_app import DemoApp, DemoBanner, fix_line
from tests.support import story
from tests.support.tui import panel_text, until

SIZE = (100, 30)
CAP = re.compile(r":cap (\d+)\b")


def banner_text(app: DemoApp) -> str:
    return str(app.query_one(DemoBanner).render())


class FirstOnly:
    """The healthy moment once, then no answer: the test feeds each moment itself, and no
    poll of the paused story feeds the healthy moment back over it meanwhile."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap: Snapshot | None = snap

    async def poll(self) -> Snapshot:
        snap, self.snap = self.snap, None
        if snap is None:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        return snap

    async def aclose(self) -> None:
        pass


async def test_the_line_follows_the_finding_shown_as_the_story_moves() -> None:
    healthy = FirstOnly(story.upto(story.MOMENTS["healthy"])[-1])
    app = story.app_at(story.MOMENTS["healthy"], app_class=DemoApp, source=healthy)
    assert isinstance(app, DemoApp)
    async with app.run_test(size=SIZE) as pilot:
        await app.first_snapshot.wait()
        await pilot.pause()
        assert "nothing to fix now" in banner_text(app)
        said: list[int] = []
        for moment in ("batching-cliff", "kv-exhausted"):
            snap = story.upto(story.MOMENTS[moment])[-1]
            advice = suggested_cap(snap.findings)
            assert advice is not None
            app.feed(snap)
            # rendering the fed poll may take several turns of the loop
            said_now = f"{advice[1].id} suggests it now"

            def says_now(text: str = said_now) -> bool:
                return text in banner_text(app)

            assert await until(pilot, says_now)
            line = banner_text(app)
            (n,) = [int(m) for m in CAP.findall(line)]
            # the number is the one the findings panel shows in the leading finding's action
            findings = " ".join(panel_text(app, "#findings").split())
            assert f"press - or :cap {n} " in findings
            said.append(n)
        # the cliff's 500-token chats fit ~50; the 4,000-token prompts fit far fewer
        assert said[0] != said[1]
        app.feed(story.upto(story.MOMENTS["after-cap"])[-1])
        assert await until(
            pilot, lambda: ":cap" not in banner_text(app)
        )  # capped: no finding asks for a lower cap


def test_fix_line_without_findings_and_without_advice() -> None:
    healthy = story.upto(story.MOMENTS["healthy"])[-1]
    assert "nothing to fix" in fix_line(healthy.findings)
    after = story.upto(story.MOMENTS["after-cap"])[-1]
    assert after.findings
    assert suggested_cap(after.findings) is None
    assert "no cap to type now" in fix_line(after.findings)
