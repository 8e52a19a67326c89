"""KV cache: how full, how big, whether it is preempting, how many requests fit at what size."""

from __future__ import annotations

from rich.text import Text

from llmtop.core.base import format as fmt
from llmtop.core.health.kvsize import kv_size
from llmtop.tui.view.present import View
from llmtop.tui.widgets.panel import Panel, bar, label, line, value


class KvPanel(Panel):
    """The memory that bounds concurrency: usage gauge and capacity in tokens."""

    TITLE = "KV cache"

    def body(self, view: View) -> Text:
        e = view.engine
        if e is None or not e.up:
            return Text("n/a (engine down)", style="dim")
        usage = e.kv_cache_usage_frac
        cached = e.prompt_cache_hit_frac
        if cached is None:  # before vLLM 0.16: the prefix cache's own hits / queries
            cached = e.prefix_cache_hit_frac
        # the prefix cache's share of prompt tokens, while it is looked up (0% included: a
        # collapsed cache is what prefix-cache-collapse names)
        queried = bool(cached) or bool(e.prefix_cache_queried_tok_per_s)
        hit = [label(" cached "), value(fmt.pct(cached))] if cached is not None and queried else []
        width = max(self.size.width - 8 - (9 + len(fmt.pct(cached)) if hit else 0), 8)
        pre = e.preemptions_per_s
        # the same sizing as the kv-exhausted finding (the larger of the mean request and what
        # each running sequence held over the last minute, at the same target fill)
        size = kv_size(e, view.history, view.snapshot.time, view.kv_target_frac)
        basis: list[Text] = []
        if size is not None and size.by_held:
            basis = [label(" ("), value("held", ""), label(")")]
        elif size is not None:
            basis = [
                label(" ("),
                value(fmt.num(e.mean_prompt_tokens, 0), ""),
                label("+"),
                value(fmt.num(e.mean_generation_tokens, 0), ""),
                label(")"),
            ]
        return Text("\n").join(
            [
                line(bar(usage, width), " ", value(fmt.pct(usage).rjust(4)), *hit),
                line(
                    label("capacity "),
                    value(fmt.num(e.kv_capacity_tokens)),
                    label(" tok  preempt "),
                    value(fmt.rate(pre), "bold red" if pre else "bold"),
                    label("/s"),
                ),
                line(
                    label("fits ~"),
                    value(fmt.num(size.fits, 0) if size is not None else "n/a"),
                    label(" at "),
                    value(fmt.num(size.per_request_tokens) if size else "n/a", ""),
                    label(" tok/req"),
                    *basis,
                ),
                *transfer_line(e.kv_transfer_bytes_per_s, e.kv_transfer_failures_per_s),
            ]
        )


def transfer_line(moved: float | None, failed: float | None) -> list[Text]:
    """The KV connector's traffic (NIXL, offload) and its failures; no line without one."""
    if moved is None and failed is None:
        return []
    gb = None if moved is None else moved / 1e9
    return [
        line(
            label("xfer "),
            value(fmt.num(gb, 2)),
            label(" GB/s  failed "),
            value(fmt.rate(failed), "bold red" if failed else "bold"),
            label("/s"),
        )
    ]
