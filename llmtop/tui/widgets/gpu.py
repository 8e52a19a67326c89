"""GPUs: per device utilisation, memory, memory bandwidth, power, temperature, throttling."""

from __future__ import annotations

from rich.text import Text

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import GpuStats
from llmtop.tui.view.present import View
from llmtop.tui.widgets.panel import Panel, label, line, value


def _watts(w: float | None) -> str:
    return fmt.NA if w is None else f"{w:.0f}W"


def _temp(c: float | None) -> str:
    return fmt.NA if c is None else f"{c:.0f}C"


class GpuPanel(Panel):
    """One line per GPU (two when wide enough), or why none is shown."""

    TITLE = "GPU"

    def body(self, view: View) -> Text:
        gpus = view.snapshot.gpus
        if not gpus:
            return Text(view.snapshot.gpu_error or "no GPU visible", style="dim")
        wide = self.size.width >= 60
        return Text("\n").join(self._gpu(g, wide) for g in gpus)

    def _gpu(self, g: GpuStats, wide: bool) -> Text:
        throttle = ",".join(g.throttle_reasons)
        util = g.util_frac
        row = line(
            label(f"{g.index} "),
            value(fmt.pct(util).rjust(4), "bold green" if util and util > 0.5 else "bold"),
            label(" mem "),
            value(f"{fmt.gib_short(g.mem_used_bytes)}/{fmt.gib_short(g.mem_total_bytes)}"),
            label(" bw "),
            value(fmt.pct(g.mem_bw_util_frac)),
            label(" "),
            value(_watts(g.power_w)),
            label(" "),
            value(_temp(g.temp_c), "bold red" if g.temp_c and g.temp_c >= 85 else "bold"),
        )
        if wide and g.name:
            row = line(row, label(f"  {g.name}"))
        if throttle:
            row.append(f" THROTTLE {throttle}", style="bold red")
        return row
