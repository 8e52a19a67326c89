"""The gateway: its limits (what the keys change) and its live state."""

from __future__ import annotations

from rich.text import Text

from llmtop.core import format as fmt
from llmtop.tui.present import View, limit_text
from llmtop.tui.widgets.panel import Panel, label, line, value


class GatewayPanel(Panel):
    """Limits and live stats: in flight/cap, queued/max, 429/s by reason, queue wait, paused;
    the mode and KV budget, and in auto mode the autopilot's last move and its reason."""

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
        limits = (
            Text(g.autopilot_reason or "autopilot: waiting for the engine's KV size", style="dim")
            if auto
            else line(
                label("timeout "),
                value(limit_text("queue_timeout_s", g.queue_timeout_s)),
                label("  rpm "),
                value(limit_text("rate_limit_rpm", g.rate_limit_rpm)),
                label("  a: autopilot"),
            )
        )
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
                line(
                    label("mode "),
                    value(g.mode or "n/a", "bold green" if auto else "bold"),
                    label("  KV budget "),
                    value(limit_text("max_inflight_kv_blocks", g.max_inflight_kv_blocks)),
                    "  ",
                    state,
                ),
                limits,
            ]
        )
