"""The `?` screen: the keys, what each panel shows, and what each finding means and asks for
(the findings' words are core.findings.catalog's GUIDE, as README's table)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from llmtop.core.findings.catalog import GUIDE
from llmtop.tui.view.keyhelp import KEYS

KEY_LINES = "\n".join(f"- {k.keys} — {k.does}" for k in KEYS)
FINDING_LINES = "\n".join(
    f"- {', '.join(f'**{i}**' for i in g.ids)} ({g.bottleneck}): {g.fires_when} → {g.action}"
    for g in GUIDE
)
"""Each finding's words, as README's table has them (core.findings.catalog.GUIDE)."""

HELP_TEXT = f"""\
## Keys
{KEY_LINES}
- Typing `:cap N` shows the what-if prediction for N beside the measured figures before Enter
  applies it; any limit set by hand switches the autopilot back to manual, and says so
- In `llmtop replay`: space play/pause, `,` / `.` step one poll, left/right seek, Home/End,
  `<` / `>` speed x1..x60; the keys above that change limits only say "read-only"

With `--read-only` every key that changes something only says "read-only". A change the
gateway refuses (down, 401, 400) is shown in red and written to the event log.

## Panels
- **Header**: the status badge (OK, DEGRADED, CRITICAL, DOWN), model, target, vLLM version and
  the age of the data. `STALE` means no fresh poll for two intervals: do not trust the numbers.
- **Findings**: the active problems, most severe first: which resource binds, the evidence,
  and (after the arrow) what to do.
- **KV cache**: usage of the engine's KV cache, its capacity in tokens, preemptions per second
  (requests evicted and recomputed) and how many requests fit at what size (the mean prompt +
  output, or `held`: what running sequences held), the number kv-exhausted suggests.
- **Sequences**: where the queue is. `engine run/wait` is vLLM's running and waiting
  requests; `gateway fly/queue` is in flight/cap and queued/max in the llmtop gateway. A queue
  in the ENGINE inflates TTFT for everyone; a queue in the GATEWAY protects the engine.
- **Latency**: time to first token (TTFT), inter-token latency (ITL) and engine queue time, at
  p50/p95/p99 over the last window; p95 is red above its SLO.
- **Throughput**: prefill (prompt) and decode (generated) tokens per second, decode speed per
  sequence (what one user sees stream) and finished requests per second.
- **Gateway**: the mode in its title (manual / auto, PAUSED), in flight/cap, queued/max,
  429s per second by reason, queue wait p95; in manual mode the queue timeout and rpm limit,
  in auto mode the KV budget (blocks), the prefill budget (tokens) and which one holds the
  queue now (else the cause of the autopilot's last move), in manual mode the limit holding
  the queue; and, when
  the gateway's SLO differs from this screen's, admission overrides it, a deadline queue or
  tenant budgets are set, one SLO line (`slo 2.00s  wait ≤1.60s (engine 400ms)`).
- **GPU**: per device utilisation, memory used/total, memory-bandwidth utilisation, power,
  temperature and throttle reasons; or why no GPU is visible.
- **Events**: the incident timeline: findings firing and clearing, limit changes (by anyone),
  failed changes, targets going down and coming back.
- **Charts** (on larger terminals): throughput and TTFT p95 against its SLO over the last minutes.

## Findings
{FINDING_LINES}

Severity follows the SLO: CRIT and WARN mean users miss it now or are about to (the finding
says the trend); INFO is a heads-up while it holds (a full cache, a queue, a slowdown), with
its headroom.
"""


class HelpScreen(ModalScreen[None]):
    """Keys, panels and findings explained; Esc, q or ? close it."""

    AUTO_FOCUS = "VerticalScroll"
    """Focused, so that the arrow and page keys scroll it (the app focuses nothing itself)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        border-title-align: center;
        width: 100%;
        max-width: 110;
        height: 100%;
        border: round $primary;
        background: $surface;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "llmtop help · Esc closes · ↑↓ scroll"
            yield Markdown(HELP_TEXT)

    def action_close(self) -> None:
        self.dismiss(None)
