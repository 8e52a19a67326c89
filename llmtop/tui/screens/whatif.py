"""The `w` screen: predictions for a few caps around the findings' suggestion, from the live
engine, refreshed every few seconds; every figure labelled a prediction."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from llmtop.errors import LlmtopError
from llmtop.tui.view.source import WhatIfSource
from llmtop.tui.work import start_worker

REFRESH_S = 5.0


class WhatIfScreen(ModalScreen[None]):
    """The what-if table; Esc, q or w close it."""

    AUTO_FOCUS = "VerticalScroll"
    """Focused, so that the arrow and page keys scroll it (the app focuses nothing itself)."""

    DEFAULT_CSS = """
    WhatIfScreen { align: center middle; }
    WhatIfScreen > VerticalScroll {
        width: 100%;
        height: 100%;
        border: round $accent;
        border-title-align: center;
        background: $surface;
        padding: 0 1;
    }
    WhatIfScreen #whatif-body { width: auto; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,w", "close", "close"),
    ]

    def __init__(self, source: WhatIfSource, caps: Callable[[], tuple[int, ...]]) -> None:
        super().__init__()
        self.source = source
        self.caps = caps
        """Asked at each refresh: the candidates follow the findings as they change."""
        self.text = "what-if: starting..."

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = "what-if: PREDICTIONS from the live engine (Esc closes)"
            yield Static(self.text, id="whatif-body")

    def on_mount(self) -> None:
        self.refresh_predictions()
        self.set_interval(REFRESH_S, self.refresh_predictions)

    def refresh_predictions(self) -> None:
        """Start the next analysis unless the last is still computing: an analysis cannot be
        cancelled once begun (seconds of CPU), so restarting every tick would pile them up."""
        if any(w.group == "whatif" and not w.is_finished for w in self.workers):
            return
        start_worker(self, self._update, group="whatif", exit_on_error=False)

    async def _update(self) -> None:
        try:
            analysis = await self.source.analyse(self.caps(), band=True)
        except LlmtopError as e:
            self.text = str(e)
        else:
            self.text = analysis.text()
        self.query_one("#whatif-body", Static).update(self.text)

    def action_close(self) -> None:
        self.dismiss(None)
