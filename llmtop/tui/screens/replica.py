"""One replica's full view: the single-engine panels on that replica's figures and findings.

Opened from the replica table (Enter), Esc back, ↑/↓ to the next replica; the app hands it a
`View` per poll (`show`). It renders only: no polling, no state but what it was shown.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from llmtop.tui.view.chart_data import throughput_chart, ttft_chart
from llmtop.tui.view.present import View
from llmtop.tui.widgets.chart import TimeChart
from llmtop.tui.widgets.findings import FindingsPanel
from llmtop.tui.widgets.gateway import GatewayPanel
from llmtop.tui.widgets.gpu import GpuPanel
from llmtop.tui.widgets.header import StatusHeader
from llmtop.tui.widgets.kv import KvPanel
from llmtop.tui.widgets.latency import LatencyPanel
from llmtop.tui.widgets.panel import Panel
from llmtop.tui.widgets.sequences import SequencesPanel
from llmtop.tui.widgets.throughput import ThroughputPanel


class ReplicaScreen(Screen[None]):
    """The dashboard of one engine, for the replica `name` of the fleet."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "back", key_display="Esc"),
    ]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.replica_name = name

    def compose(self) -> ComposeResult:
        yield StatusHeader()
        yield FindingsPanel(id="replica-findings")
        with Grid(id="panels"):
            yield KvPanel()
            yield SequencesPanel()
            yield LatencyPanel()
            yield GatewayPanel()
            yield ThroughputPanel()
            yield GpuPanel()
        with Horizontal(id="charts"):
            yield TimeChart(id="replica-ttft")
            yield TimeChart(id="replica-tput")
        yield Footer(compact=True)

    def show(self, name: str, view: View, *, charts: bool) -> None:
        """Render the replica `name` at one moment (its own history in `view.history`)."""
        self.replica_name = name
        self.query_one(StatusHeader).view = view
        findings = self.query_one(FindingsPanel)
        findings.border_title = f"Replica {name}: its own findings (Esc: back to the fleet)"
        for panel in self.query("Panel"):  # by name: mypy takes no abstract class for a type
            if isinstance(panel, Panel):
                panel.view = view
        if charts and self.query_one("#charts").display:
            ttft = self.query_one("#replica-ttft", TimeChart)
            tput = self.query_one("#replica-tput", TimeChart)
            ttft.data = ttft_chart(view.history, view.ttft_slo_s, 2 * ttft.size.width)
            tput.data = throughput_chart(view.history, 2 * tput.size.width)
