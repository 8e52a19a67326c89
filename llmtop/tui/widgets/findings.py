"""The active findings, most severe first: what binds, the evidence, and the action to take."""

from __future__ import annotations

from rich.text import Text

from llmtop.tui.view.present import View, badge, shown_findings
from llmtop.tui.widgets.panel import Panel

SEVERITY_STYLE = {
    "critical": "bold white on red",
    "warning": "bold black on yellow",
    "info": "bold black on cyan",
}
SEVERITY_TAG = {"critical": "CRIT", "warning": "WARN", "info": "INFO"}


class FindingsPanel(Panel):
    """The most important panel: read at a glance, each finding says what to do."""

    TITLE = "Findings"
    WRAPS = True
    DEFAULT_CSS = """
    FindingsPanel { max-height: 9; }
    """

    def body(self, view: View) -> Text:
        findings = shown_findings(view.snapshot)
        problems = self._problems(view, {f.id for f in findings})
        if problems and not findings:
            return problems
        if not findings:
            b = badge(view.snapshot, stale=view.stale)
            if b == "OK":
                return Text("none: serving within SLO", style="green")
            if view.stale:
                return Text("none computed: the data is stale (see the header)", style="yellow")
            return Text("none (not enough data yet)", style="dim")
        out = problems or Text()
        for i, f in enumerate(findings):
            if i or problems:
                out.append("\n")
            out.append(f" {SEVERITY_TAG.get(f.severity, f.severity)} ", SEVERITY_STYLE[f.severity])
            out.append(f" {f.id}", style="bold")
            out.append(f" [{f.bottleneck}] ", style="dim")
            out.append(f.summary)
            out.append("\n   → ", style="bold cyan")
            out.append(f.action, style="cyan")
        return out

    def _problems(self, view: View, ids: set[str]) -> Text | None:
        """Why the data is missing: the poll failing, engines down (unless a finding says so)."""
        lines: list[Text] = []
        if view.poll_error:
            lines.append(
                Text.assemble(
                    (" POLL ", "bold white on red"), (" failed: ", "bold"), view.poll_error
                )
            )
        if "target-down" not in ids:
            for e in view.snapshot.engines:
                if not e.up:
                    lines.append(
                        Text.assemble(
                            (" DOWN ", "bold white on red"),
                            (f" {e.url}: ", "bold"),
                            e.error or "no answer",
                        )
                    )
        return Text("\n").join(lines) if lines else None
