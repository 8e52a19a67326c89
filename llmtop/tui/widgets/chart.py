"""A small line chart of the last minutes (textual-plotext); only drawn when it is on screen."""

from __future__ import annotations

from textual.reactive import reactive
from textual_plotext import PlotextPlot

from llmtop.tui.present import ChartData


class TimeChart(PlotextPlot):
    """Renders `data`; the app updates it only while the chart is displayed."""

    DEFAULT_CSS = """
    TimeChart {
        height: 1fr;
        min-height: 6;
    }
    """

    data: reactive[ChartData | None] = reactive(None)

    def watch_data(self) -> None:
        self._draw()

    def on_mount(self) -> None:
        super().on_mount()
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        data = self.data
        if data is None:
            plt.title("waiting for data")
            self.refresh()
            return
        plt.title(data.title)
        drawn = False
        lo, hi = 0.0, 0.0
        for s in data.series:
            pts = [(x, y) for x, y in zip(s.xs, s.ys, strict=False) if y is not None]
            if len(pts) < 1:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            lo = min(lo, min(xs))
            hi = max(hi, max(ys))
            plt.plot(xs, ys, label=s.label, color=s.color, marker="braille")
            drawn = True
        if data.hline is not None:
            plt.horizontal_line(data.hline, color="red")
            hi = max(hi, data.hline)
            if data.hline_label:
                plt.text(data.hline_label, x=lo if lo < 0 else -1, y=data.hline, color="red")
        if not drawn:
            plt.title(f"{data.title}: no data yet")
        plt.xlabel("seconds ago")
        plt.ylim(0, hi * 1.15 if hi > 0 else 1)
        self.refresh()
