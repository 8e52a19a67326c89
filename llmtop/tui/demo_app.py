"""`llmtop demo`'s screen: the live app with one line on top that says what to do now.

The line shows the active findings' own cap (`suggested_cap`, the `:cap N` of their action) at
every poll, so the advice changes with the findings, never a number fixed in a scenario.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.widgets import Static

from llmtop.core.base.snapshot import Finding, Snapshot
from llmtop.core.health.rulebase import suggested_cap
from llmtop.tui.app import LlmtopApp


def fix_line(findings: Iterable[Finding]) -> str:
    """What the demo tells the user to do at this poll."""
    found = tuple(findings)
    advice = suggested_cap(found)
    if advice is not None:
        n, f = advice
        return f"demo · fix: type :cap {n} or press - down to {n} ({f.id} suggests it now)"
    if found:
        return "demo · no cap to type now: each finding's → line says what to do"
    return "demo · nothing to fix now: the findings will say when (q quits)"


class DemoBanner(Static):
    """One line above the header."""

    DEFAULT_CSS = """
    DemoBanner {
        dock: top;
        height: 1;
        background: $accent;
        color: $text;
        text-style: bold;
    }
    """


class DemoApp(LlmtopApp):
    """The live app plus the demo's line."""

    def compose(self) -> ComposeResult:
        yield DemoBanner("demo · waiting for the first poll", id="demo-banner")
        yield from super().compose()

    def feed(self, snap: Snapshot) -> None:
        super().feed(snap)
        for banner in self._widgets(DemoBanner):  # none while starting or shutting down
            banner.update(fix_line(snap.findings))
