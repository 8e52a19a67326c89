"""Throughput: prefill vs decode tokens per second, and decode speed per sequence."""

from __future__ import annotations

from rich.text import Text

from llmtop.core.base import format as fmt
from llmtop.tui.view.present import View
from llmtop.tui.widgets.panel import Panel, label, line, value


class ThroughputPanel(Panel):
    """Which phase the engine spends its time in; per-sequence decode is what a user streams."""

    TITLE = "Throughput"

    def body(self, view: View) -> Text:
        e = view.engine
        if e is None or not e.up:
            return Text("n/a (engine down)", style="dim")
        finished = sum(e.finished_per_s.values()) if e.finished_per_s else None
        spec = spec_line(e.spec_acceptance_frac, e.spec_mean_accepted_len, e.spec_acceptance_by_pos)
        return Text("\n").join(
            [
                line(
                    label("prefill "),
                    value(fmt.num(e.prompt_tok_per_s).rjust(6)),
                    label("  decode "),
                    value(fmt.num(e.decode_tok_per_s).rjust(6)),
                    label(" tok/s"),
                ),
                line(
                    label("per seq "),
                    value(fmt.num(e.decode_tok_per_s_per_seq).rjust(6)),
                    label(" tok/s  done "),
                    value(fmt.rate(finished)),
                    label(" req/s"),
                ),
                *spec,
            ]
        )


def spec_line(
    accepted: float | None, per_step: float | None, by_pos: tuple[float, ...]
) -> list[Text]:
    """Speculative decoding's acceptance, mean tokens per step and acceptance by position;
    no line when the engine does not export it."""
    if accepted is None:
        return []
    pos = "/".join(f"{p * 100:.0f}" for p in by_pos[:4])
    return [
        line(
            label("spec acc "),
            value(fmt.pct(accepted), "bold yellow" if accepted < 0.25 else "bold"),
            label("  "),
            value(fmt.num(per_step, 1)),
            label(" tok/step"),
            *([label(f" {pos}%")] if pos else []),
        )
    ]
