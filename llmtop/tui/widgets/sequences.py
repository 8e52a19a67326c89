"""Where the queue is: engine running vs waiting beside gateway in-flight vs queued."""

from __future__ import annotations

from rich.text import Text

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import LoraAdapters
from llmtop.tui.view.present import View, queue_location
from llmtop.tui.widgets.panel import Panel, label, line, value


def lora_cells(lora: LoraAdapters | None) -> list[Text]:
    """LoRA slots as "lora 1/1 +2": running adapters of max, and how many wait (LoRA on)."""
    if lora is None:
        return []
    slots = "--" if lora.max_loras is None else str(lora.max_loras)
    waiting = len(lora.waiting)
    return [
        label("  lora "),
        value(f"{len(lora.running)}/{slots}"),
        *([value(f" +{waiting}", "bold yellow")] if waiting else []),
    ]


class SequencesPanel(Panel):
    """Engine and gateway side by side; the first line names where requests wait."""

    TITLE = "Sequences"

    def body(self, view: View) -> Text:
        e = view.engine
        g = view.snapshot.gateway
        where = queue_location(e, g)
        where_style = (
            "bold yellow"
            if "ENGINE" in where or "BOTH" in where
            else "bold green"
            if "GATEWAY" in where
            else "bold"
        )
        rows = [Text(where, style=where_style)]
        if e is not None and e.up:
            waiting = e.waiting
            # vLLM >= 0.20 says why: deferred (LoRA budget, KV transfer) is not a capacity wait
            deferred = (
                [label(" ("), value(fmt.integer(e.waiting_deferred)), label(" deferred)")]
                if e.waiting_deferred
                else []
            )
            rows.append(
                line(
                    label("engine  run "),
                    value(fmt.integer(e.running).rjust(4)),
                    label("  wait "),
                    value(fmt.integer(waiting), "bold yellow" if waiting else "bold"),
                    *deferred,
                    *lora_cells(e.lora),
                )
            )
        else:
            rows.append(line(label("engine  "), value("n/a")))
        if g is not None and g.up:
            rows.append(
                line(
                    label("gateway in  "),
                    value(f"{fmt.integer(g.in_flight)}/{fmt.integer(g.max_concurrency)}".rjust(4)),
                    label("  queue "),
                    value(f"{fmt.integer(g.queued)}/{fmt.integer(g.max_queue)}"),
                )
            )
        else:
            rows.append(line(label("gateway "), value("n/a" if g is None else "down", "red")))
        return Text("\n").join(rows)
