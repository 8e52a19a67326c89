"""The dashboard's two charts (TTFT, throughput over the last 10 minutes), owned by the app.

Mounted just after the first frame (plotext would delay it) and redrawn every CHART_EVERY_S of
snapshot time: a redraw costs more than all the panels, and a 10-minute chart gains nothing a poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.app import App

from llmtop.core.base.snapshot import Snapshot
from llmtop.tui.view.chart_data import EngineOf, throughput_chart, ttft_chart

CHART_EVERY_S = 5.0
"""Seconds (of snapshot time) between chart redraws; the numbers refresh every poll."""


class Charts:
    """`history` is the app's (read at each redraw); `engine_of` combines a snapshot's
    engines, once per snapshot, for the panels and the charts alike."""

    def __init__(
        self,
        app: App[Any],
        history: Sequence[Snapshot],
        ttft_slo_s: float,
        engine_of: EngineOf,
    ) -> None:
        self.app = app
        self.history = history
        self.ttft_slo_s = ttft_slo_s
        self.engine_of = engine_of
        self._state = "none"
        """The charts' widgets: none yet, pending (to be mounted after this frame), mounted."""
        self._drawn_at: float | None = None
        """The snapshot time of the last redraw."""

    def due(self, snap_time: float) -> bool:
        """Whether a snapshot at `snap_time` redraws them: CHART_EVERY_S on, or time went back."""
        last = self._drawn_at
        return last is None or snap_time < last or snap_time - last >= CHART_EVERY_S

    def _box(self) -> Any | None:
        stack = self.app.screen_stack
        boxes = list(stack[0].query("#charts")) if stack else []
        return boxes[0] if boxes else None

    def _mount(self) -> None:
        from llmtop.tui.widgets.chart import TimeChart

        box = self._box()
        if box is not None and self._state == "pending":
            box.mount(TimeChart(id="ttft-chart"), TimeChart(id="tput-chart"))
            self._state = "mounted"
            self.app.call_after_refresh(self.render)

    def render(self) -> None:
        """Redraw now (the first call mounts them after this frame, then draws)."""
        box = self._box()
        if box is None or not box.display or not self.history:
            return
        if self._state != "mounted":
            if self._state == "none":
                self._state = "pending"
                self.app.call_after_refresh(self._mount)
            return
        from llmtop.tui.widgets.chart import TimeChart

        self._drawn_at = self.history[-1].time
        ttft = box.query_one("#ttft-chart", TimeChart)
        tput = box.query_one("#tput-chart", TimeChart)
        # two braille dots per cell: more points than that cost CPU and show nothing
        of = self.engine_of
        ttft.data = ttft_chart(self.history, self.ttft_slo_s, 2 * ttft.size.width, engine_of=of)
        tput.data = throughput_chart(self.history, 2 * tput.size.width, engine_of=of)
