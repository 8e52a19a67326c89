"""`w` opens the what-if screen; while the command line holds `cap N`, a line above it shows
the prediction for N beside what is measured now, before Enter applies it, refreshed while the
line stays open (each second while the window fills, then as often as the what-if screen).
Without a what-if source (replays, most tests) both say so or show nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from textual.app import App
from textual.widgets import Input, Static

from llmtop.errors import LlmtopError
from llmtop.tui.view.caps import typed_cap
from llmtop.tui.view.source import WhatIfSource
from llmtop.tui.widgets.commandline import CommandLine
from llmtop.tui.work import start_worker

PREVIEW_GROUP = "whatif-preview"
"""The worker group of the `:cap N` preview (one at a time: a new keystroke replaces it)."""


class WhatIfPreview(Static):
    """One line above the command line: the prediction for the cap being typed."""

    DEFAULT_CSS = """
    WhatIfPreview {
        display: none;
        height: auto;
        padding: 0 1;
        background: $boost;
        color: $text-accent;
    }
    """


class WhatIfControls:
    """`w` and the `:cap N` preview, owned by the app; `caps` gives the candidates to predict
    (asked at each refresh, so they follow the findings)."""

    def __init__(
        self, app: App[Any], source: WhatIfSource | None, caps: Callable[[], tuple[int, ...]]
    ) -> None:
        self.app = app
        self.source = source
        self.caps = caps

    def open_screen(self) -> None:
        """`w`: the what-if table, or why there is none."""
        if self.source is None:
            self.app.notify("what-if needs a live engine (not a replay)", severity="warning")
            return
        from llmtop.tui.screens.whatif import WhatIfScreen

        self.app.push_screen(WhatIfScreen(self.source, self.caps))

    def _preview(self) -> WhatIfPreview:
        dashboard = self.app.screen_stack[0]
        found = list(dashboard.query(WhatIfPreview))
        if found:
            return found[0]
        preview = WhatIfPreview(id="whatif-preview")
        dashboard.mount(preview, before="#cmdline")
        return preview

    def line_changed(self, line: Input) -> None:
        """The command line's text changed: predict the cap it holds, or hide the preview."""
        if not isinstance(line, CommandLine) or not line.is_open or self.source is None:
            return  # a change that arrives after Enter or Escape closed the line shows nothing
        cap = typed_cap(line.value)  # the newest: the changes of a burst arrive after its keys
        preview = self._preview()
        if cap is None:
            self.app.workers.cancel_group(self.app, PREVIEW_GROUP)
            preview.display = False
            return
        preview.display = True
        preview.update(f"what-if: predicting cap {cap}...")
        start_worker(self.app, partial(self._predict, cap), group=PREVIEW_GROUP, exclusive=True)

    async def _predict(self, cap: int) -> None:
        """Predict `cap` until the line closes or holds something else: "collecting metrics
        (n s of 30)" counts up instead of standing still, and a prediction follows the traffic
        while the person thinks."""
        from llmtop.tui.screens.whatif import REFRESH_S
        from llmtop.whatif.model.render import preview_line

        source = self.source
        assert source is not None
        preview = self._preview()
        while preview.display:
            try:
                a = await source.analyse((cap,))
            except LlmtopError as e:
                preview.update(str(e))
                await asyncio.sleep(1.0)
                continue
            first, last = a.predictions[0], a.predictions[-1]
            preview.update(preview_line(a.observed, a.checks, first, last, a.options.horizon_s))
            await asyncio.sleep(REFRESH_S)

    def hide_preview(self) -> None:
        """The command line closed: the preview goes with it, and stops predicting."""
        app = self.app
        app.workers.cancel_group(app, PREVIEW_GROUP)
        for preview in app.screen_stack[0].query(WhatIfPreview) if app.screen_stack else ():
            preview.display = False
