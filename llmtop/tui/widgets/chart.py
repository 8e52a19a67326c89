"""A small line chart of the last minutes (textual-plotext); only drawn when it is on screen."""

from __future__ import annotations

from textual.app import RenderResult
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from llmtop.tui.view.chart_data import ChartData, x_ticks, y_ticks


class TimeChart(PlotextPlot):
    """Renders `data`; the app updates it only while the chart is displayed."""

    DEFAULT_CSS = """
    TimeChart {
        height: 1fr;
    }
    """

    data: reactive[ChartData | None] = reactive(None)

    MIN_HEIGHT = 7
    """Below this many lines a plot is noise: the chart shows nothing."""

    _draws = 0
    """Figures drawn so far: part of the render cache's key."""
    _cache: tuple[object, ...] | None = None
    _cached: RenderResult = ""

    def render(self) -> RenderResult:
        if self.size.height < self.MIN_HEIGHT:
            return ""
        # Textual re-renders on every layout pass (other panels growing or shrinking); a plotext
        # figure is expensive to build, so it is rebuilt only for new data or a resize
        key = (self._draws, self.size, self.app.theme)
        if key != self._cache:
            self._cached = super().render()
            self._cache = key
        return self._cached

    def watch_data(self) -> None:
        self._draw()

    def on_mount(self) -> None:
        super().on_mount()
        self._draw()

    def _draw(self) -> None:
        self._draws += 1
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        data = self.data
        if data is None:
            plt.title("waiting for data")
            self.refresh()
            return
        drawn = False
        lo, hi = -60.0, 0.0
        for s in data.series:
            pts = [(x, y) for x, y in zip(s.xs, s.ys, strict=False) if y is not None]
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            lo = min(lo, min(xs))
            hi = max(hi, max(ys))
            plt.plot(xs, ys, label=s.label, color=s.color, marker="braille")
            drawn = True
        if data.hline is not None:  # a two-point line: plotext's hline does not span the axis
            plt.plot(
                [lo, 0.0],
                [data.hline, data.hline],
                label=data.hline_label,
                color="red",
                marker="braille",
            )
            hi = max(hi, data.hline)
        plt.title(data.title if drawn else f"{data.title}: no data yet")
        plt.xlim(lo, 0)
        xt, xl = x_ticks(lo)
        plt.xticks(xt, xl)
        yt, yl = y_ticks(hi * 1.1, data.y_unit)
        plt.yticks(yt, yl)
        plt.ylim(0, yt[-1])
        self.refresh()
