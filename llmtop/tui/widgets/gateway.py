"""The gateway: its limits (what the keys change) and its live state."""

from __future__ import annotations

from rich.text import Text

from llmtop.core.base import format as fmt
from llmtop.tui.view.present import View, advice_text, deadline_text, limit_text, scaleout_text
from llmtop.tui.widgets.panel import Panel, label, line, value

HELD_BY = {
    "max_concurrency": "cap",
    "max_inflight_kv_blocks": "KV budget",
    "max_unprefilled_prompt_tokens": "prefill budget",
    "max_inflight_prompt_tokens": "token budget",
    "share_slots": "share",
    "share_kv_blocks": "share",
}
"""The limit holding the queue's head, in the panel's words."""


class GatewayPanel(Panel):
    """Limits and live stats: in flight/cap, queued/max, 429/s by reason, queue wait, paused;
    the mode in the title, in auto mode the KV and prefill budgets and what holds the queue now
    (else the cause of the last move), in manual mode the limit holding the queue, in advise
    mode that and the autopilot's suggestion, and with
    a deadline queue what a request may wait of the SLO (admission's overrides named)."""

    TITLE = "Gateway"

    def body(self, view: View) -> Text:
        g = view.snapshot.gateway
        if g is None:
            return Text("no gateway: admission keys off", style="dim")
        if not g.up:
            return Text(f"DOWN: {g.error or 'no answer'}", style="bold red")
        rejected = {k: v for k, v in g.rejected_per_s.items() if v}
        r429 = (
            "  ".join(f"{k} {fmt.rate(v)}" for k, v in sorted(rejected.items()))
            if rejected
            else "0"
        )
        wait_style = (
            "bold red"
            if g.queue_wait_p95_s is not None and g.queue_wait_p95_s > view.queue_wait_slo_s
            else "bold"
        )
        state = (
            Text("PAUSED", style="bold reverse red")
            if g.paused
            else value("n/a" if g.paused is None else "admitting", "green")
        )
        auto = g.mode == "auto"
        # the mode is left out when the gateway does not report one (an older gateway, a
        # recording made before modes existed)
        mode = f" · {g.mode}" if g.mode else ""
        self.border_title = f"{self.TITLE}{mode}" + (" · PAUSED" if g.paused else "")
        more = scaleout_text(g)  # replicas' in flight, the shared limits (Redis) or FALLBACK
        if more:
            self.border_title += f" · {more}"
        if auto:
            # The full move ("KV budget 2,907 -> 2,592 blocks: preempting 2.0/s") is in the event
            # log; here the budget and the cause of the last move, cut to the panel's width.
            # What holds the queue now, when something does; else the cause of the last move.
            cause = (g.autopilot_reason or "waiting for the engine's KV size").split(": ", 1)[-1]
            held = f"held by {HELD_BY.get(g.binding, g.binding)}" if g.binding else None
            budget = limit_text("max_inflight_kv_blocks", g.max_inflight_kv_blocks)
            prefill = limit_text("max_unprefilled_prompt_tokens", g.max_unprefilled_prompt_tokens)
            limits = line(
                label("budget "),
                value(f"{budget} blk"),
                label(" prefill "),
                value(f"{prefill} tok"),
                Text(f"  {held}", style="bold yellow") if held else label(f"  {cause}"),
            )
            limits.truncate(max(10, self.content_size.width), overflow="ellipsis")
        else:
            limits = line(
                label("timeout "),
                value(limit_text("queue_timeout_s", g.queue_timeout_s)),
                label("  rpm "),
                value(limit_text("rate_limit_rpm", g.rate_limit_rpm)),
                "  ",
                state,
                *(
                    (label("  held by "), value(HELD_BY.get(g.binding, g.binding), "yellow"))
                    if g.binding
                    else ()
                ),
            )
        extra = []
        advice = advice_text(g)  # mode advise: the autopilot's suggestion (`A` applies it)
        if advice is not None:
            suggests = line(label("advise "), Text(advice, style="bold cyan"))
            suggests.truncate(max(10, self.content_size.width), overflow="ellipsis")
            extra.append(suggests)
        pieces = deadline_text(g, view.ttft_slo_s)
        if pieces:
            slo = Text.assemble(*((t, "bold yellow" if look else "dim") for t, look in pieces))
            slo.truncate(max(10, self.content_size.width), overflow="ellipsis")
            extra.append(slo)
        return Text("\n").join(
            [
                line(
                    label("in flight "),
                    value(f"{fmt.integer(g.in_flight)}/{fmt.integer(g.max_concurrency)}"),
                    label("  queued "),
                    value(f"{fmt.integer(g.queued)}/{fmt.integer(g.max_queue)}"),
                ),
                line(
                    label("429/s "),
                    value(r429, "bold red" if rejected else "bold"),
                    label("  wait p95 "),
                    value(fmt.dur(g.queue_wait_p95_s), wait_style),
                ),
                limits,
                *extra,
            ]
        )
