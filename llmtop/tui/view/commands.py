"""The TUI's limit changes as pure functions: the `:` command language and the key steps.

A bad command is a one-line UsageError for the status line. Only syntax is checked here: the
gateway judges ranges, so its own 400 message is what shows.
"""

from __future__ import annotations

from typing import Any

from llmtop.core.base.admin_api import LIMITS, limit_spec
from llmtop.errors import UsageError

QUEUE_STEP = 8
"""How much `]` and `[` change max_queue."""

COMMANDS: dict[str, tuple[str, str, bool]] = {
    # word: (limit field, kind, may be off), from the one table of limits
    s.word: (s.field, s.kind, s.may_be_off)
    for s in LIMITS
}
ALIASES = {"concurrency": "cap", "max_concurrency": "cap", "max_queue": "queue", "q": "queue"}
ACTIONS = ("pause", "resume")

USAGE = "commands: " + " · ".join(
    [
        *(
            f"{s.word} {'|'.join(s.choices)}"
            if s.kind == "choice"
            else f"{s.word} {'S' if s.unit == 's' else 'N'}{'|off' if s.may_be_off else ''}"
            for s in LIMITS
        ),
        *ACTIONS,
    ]
)


def parse_command(text: str) -> dict[str, Any] | str:
    """A limits change (dict for PATCH /admin/limits), or "pause"/"resume"."""
    words = text.strip().lstrip(":").split()
    if not words:
        raise UsageError(USAGE)
    word = ALIASES.get(words[0].lower(), words[0].lower())
    if word in ACTIONS and len(words) == 1:
        return word
    if word not in COMMANDS:
        raise UsageError(f"unknown command {words[0]!r}; {USAGE}")
    field, kind, may_be_off = COMMANDS[word]
    if len(words) != 2:
        raise UsageError(f"usage: {word} {'N|off' if may_be_off else 'N'}")
    raw = words[1].lower()
    if may_be_off and raw in ("off", "none", "0"):
        return {field: None}
    if kind == "choice":
        return {field: raw}  # the gateway names the allowed words if it is not one
    try:
        number: float = int(raw) if kind == "int" else float(raw)
    except ValueError:
        want = "a whole number" if kind == "int" else "a number"
        raise UsageError(f"{word}: expected {want}, got {words[1]!r}") from None
    # Ranges are the gateway's to judge: its 400 message is shown as it is.
    return {field: number}


FINE_STEP_BELOW = 16
"""`+`/`-` step by 1 up to this cap and halve/double above it, so a wide-open cap (256, the
engine's own default) comes down to a useful value in a few presses, and tuning near the KV
arithmetic's answer (usually under 16 on one GPU) stays exact."""


def step_concurrency(current: int | None, delta: int) -> int:
    """The next max_concurrency for `+`/`-`: +-1 up to 16, doubling/halving above; at least 1."""
    if current is None:
        raise UsageError("the gateway's current max concurrency is unknown")
    if delta < 0 and current > FINE_STEP_BELOW:
        return max(FINE_STEP_BELOW, current // 2)
    if delta > 0 and current >= FINE_STEP_BELOW:
        return current * 2
    return max(1, current + delta)


def step_queue(current: int | None, direction: int) -> int:
    """The next max_queue for `]`/`[`: plus or minus QUEUE_STEP, at least 0."""
    if current is None:
        raise UsageError("the gateway's current max queue is unknown")
    return max(0, current + direction * QUEUE_STEP)


def label_of(field: str) -> str:
    """The command word of a limit field: max_concurrency -> cap."""
    spec = limit_spec(field)
    return field if spec is None else spec.word
