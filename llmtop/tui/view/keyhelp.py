"""What each key and `:` word does, in one table of pure data: the `?` screen, README's and
docs/tui.md's tables are made from it (scripts/docs_tables.py), and tests/unit/test_docs.py
checks that it names every binding of the app and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.base.admin_api import LIMITS, LimitSpec
from llmtop.tui.view.commands import ACTIONS, FINE_STEP_BELOW, QUEUE_STEP


@dataclass(frozen=True)
class KeyHelp:
    """One row of the key table: the app's actions it explains, as a person reads it."""

    actions: tuple[str, ...]
    """The binding actions (LlmtopApp.BINDINGS, without arguments) this row explains."""
    keys: str
    """The keys as shown (markdown)."""
    does: str


def limit_word_usage(spec: LimitSpec) -> str:
    """`cap N`, `rpm N|off`, `policy fifo|deadline|codel|lifo`: a `:` word and its argument."""
    if spec.kind == "choice":
        return f"{spec.word} {'|'.join(spec.choices)}"
    arg = "S" if spec.unit == "s" else "N"
    return f"{spec.word} {arg}{'|off' if spec.may_be_off else ''}"


WORDS: str = (
    ", ".join(f"`{limit_word_usage(s)}`" for s in LIMITS)
    + ", "
    + ", ".join(f"`{a}`" for a in ACTIONS)
)
"""Every `:` word with its argument, in the table of limits' order."""

KEYS: tuple[KeyHelp, ...] = (
    KeyHelp(
        ("cap",),
        "`+` / `-`",
        f"gateway max concurrency +1 / -1 up to {FINE_STEP_BELOW}, double / halve above"
        " (256 -> 8 in 12 presses)",
    ),
    KeyHelp(("queue",), "`]` / `[`", f"gateway max queue +{QUEUE_STEP} / -{QUEUE_STEP}"),
    KeyHelp(
        ("command",),
        "`:`",
        f"command line for exact values: {WORDS}; Enter runs, Esc closes; a paste goes into"
        " it (with the line closed a paste opens it holding the text; only Enter runs it)",
    ),
    KeyHelp(("pause",), "`p`", "pause / resume admission (asks to confirm)"),
    KeyHelp(("autopilot",), "`a`", "autopilot on / off (gateway mode auto / manual)"),
    KeyHelp(("apply_suggestion",), "`A`", "set the autopilot's suggestion (gateway mode advise)"),
    KeyHelp(
        ("whatif",),
        "`w`",
        "what-if: predicted TTFT, goodput and 429s for caps around the findings' suggestion",
    ),
    KeyHelp(
        ("select_replica", "open_replica"),
        "`↑` `↓` (`k` `j`), Enter",
        "a fleet: select a replica, open its own panels (Esc goes back)",
    ),
    KeyHelp(("record",), "`r`", "start / stop recording"),
    KeyHelp(
        ("past",),
        "`h`",
        "the past (`--past`, 1h: the gateway's history or Prometheus) and what came since as a"
        " replay with its timeline; `h` there comes back to live",
    ),
    KeyHelp(("help",), "`?`", "help: every key, panel and finding explained"),
    KeyHelp(("quit",), "`q`, Ctrl-C", "quit"),
)
"""The dashboard's keys, in the order the `?` screen and README show them."""
