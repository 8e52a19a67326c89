"""The TUI's what-if hook: `w` opens the what-if screen, and while the `:` command line holds
`cap N` a line above it shows the prediction for N beside what is measured now, before Enter
applies it, refreshed while the line stays open (each second while the window fills, then as
often as the what-if screen). Mixed into `LlmtopApp`; without a live feed (replays, tests) both
say so."""

from __future__ import annotations

import asyncio
from collections import deque
from functools import partial

from textual.widgets import Input, Static

from llmtop.core.base.snapshot import Snapshot
from llmtop.core.derive.aggregate import combine
from llmtop.core.health.kvsize import kv_fit
from llmtop.core.health.rulebase import suggested_cap
from llmtop.core.health.thresholds import HealthSettings
from llmtop.errors import LlmtopError
from llmtop.sources.whatif_feed import HORIZON_S, WhatIfFeed
from llmtop.tui.controls import AdminControls
from llmtop.tui.view import commands
from llmtop.tui.widgets.commandline import CommandLine
from llmtop.tui.work import start_worker


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


class WhatIfControls(AdminControls):
    """`w` and the `:cap N` preview; the app sets `whatif` (None: not live)."""

    whatif: WhatIfFeed | None = None
    history: deque[Snapshot]
    health: HealthSettings

    def candidate_caps(self) -> tuple[int, ...]:
        """Caps around the findings' suggestion (else the same KV fit the rules compute) and the
        current cap, from the latest snapshot."""
        from llmtop.whatif.model.render import caps_around  # the what-if loads when first used

        snap = self.snapshot
        current = snap.gateway.max_concurrency if snap and snap.gateway else None
        if snap is None:
            return caps_around(current, None)
        advice = suggested_cap(snap.findings)
        if advice is not None:
            return caps_around(current, advice[0])
        engine = combine(snap.engines)
        if engine is None:
            return caps_around(current, None)
        fit = kv_fit(engine, tuple(self.history), snap.time, self.health.kv_target_frac)
        return caps_around(current, fit)

    def action_whatif(self) -> None:
        if self.whatif is None:
            self.notify("what-if needs a live engine (not a replay)", severity="warning")
            return
        from llmtop.tui.screens.whatif import WhatIfScreen

        self.push_screen(WhatIfScreen(self.whatif, self.candidate_caps))

    def _preview(self) -> WhatIfPreview:
        found = list(self.screen_stack[0].query(WhatIfPreview))
        if found:
            return found[0]
        preview = WhatIfPreview(id="whatif-preview")
        self.screen_stack[0].mount(preview, before="#cmdline")
        return preview

    def on_input_changed(self, event: Input.Changed) -> None:
        line = event.input
        if not isinstance(line, CommandLine) or not line.is_open or self.whatif is None:
            return  # a change that arrives after Enter or Escape closed the line shows nothing
        value = line.value  # the newest: the changes of a burst arrive after its keys
        try:
            parsed = commands.parse_command(value) if value.strip() else None
        except LlmtopError:
            parsed = None
        preview = self._preview()
        if not isinstance(parsed, dict) or not isinstance(parsed.get("max_concurrency"), int):
            self.workers.cancel_group(self, "whatif-preview")
            preview.display = False
            return
        cap = parsed["max_concurrency"]
        preview.display = True
        preview.update(f"what-if: predicting cap {cap}...")
        start_worker(self, partial(self._predict, cap), group="whatif-preview", exclusive=True)

    async def _predict(self, cap: int) -> None:
        """Predict `cap` until the line closes or holds something else (a new keystroke
        replaces this worker): "collecting metrics (n s of 30)" counts up instead of standing
        still, and a prediction follows the traffic while the person thinks."""
        from llmtop.tui.screens.whatif import REFRESH_S
        from llmtop.whatif.model.render import preview_line

        feed = self.whatif
        assert feed is not None
        preview = self._preview()
        while preview.display:
            try:
                a = await feed.analyse((cap,))
            except LlmtopError as e:
                preview.update(str(e))
                await asyncio.sleep(1.0)
                continue
            preview.update(
                preview_line(a.observed, a.checks, a.predictions[0], a.predictions[-1], HORIZON_S)
            )
            await asyncio.sleep(REFRESH_S)

    def hide_preview(self) -> None:
        """The command line closed: the preview goes with it, and stops predicting."""
        self.workers.cancel_group(self, "whatif-preview")
        for preview in self.screen_stack[0].query(WhatIfPreview) if self.screen_stack else ():
            preview.display = False

    def command_closed(self) -> None:
        super().command_closed()
        self.hide_preview()
