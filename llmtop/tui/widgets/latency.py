"""Latency: TTFT and ITL p50/p95/p99 and engine queue time; p95 coloured against its SLO."""

from __future__ import annotations

from rich.text import Text

from llmtop.core.base import format as fmt
from llmtop.tui.view.present import View
from llmtop.tui.widgets.panel import Panel, label, line, value


def _slo_style(v: float | None, slo: float) -> str:
    if v is None:
        return "bold"
    return "bold red" if v > slo else "bold green"


class LatencyPanel(Panel):
    """What users feel; p95 is red above the SLO (settings: ttft_slo_s, itl_slo_s)."""

    TITLE = "Latency  p50 / p95 / p99"

    def body(self, view: View) -> Text:
        e = view.engine
        if e is None or not e.up:
            return Text("n/a (engine down)", style="dim")

        def row(
            name: str, p50: float | None, p95: float | None, p99: float | None, slo: float | None
        ) -> Text:
            return line(
                label(name.ljust(6)),
                value(fmt.dur(p50).rjust(6), ""),
                value(fmt.dur(p95).rjust(7), _slo_style(p95, slo) if slo else "bold"),
                value(fmt.dur(p99).rjust(7), ""),
                label(f" slo {fmt.dur(slo)}" if slo else ""),
            )

        return Text("\n").join(
            [
                row("TTFT", e.ttft_p50_s, e.ttft_p95_s, e.ttft_p99_s, view.ttft_slo_s),
                row("ITL", e.itl_p50_s, e.itl_p95_s, e.itl_p99_s, view.itl_slo_s),
                row("queue", e.queue_time_p50_s, e.queue_time_p95_s, None, None),
            ]
        )
