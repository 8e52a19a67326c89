"""What a finding's alert says in PromQL and in words; its id, class, hold and static advice
are the finding's definition's (core.findings), which makes the alerting rule of it. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


def alert_name(finding: str) -> str:
    """kv-exhausted -> LlmtopKvExhausted (degraded-200 -> LlmtopDegraded200)."""
    return "Llmtop" + "".join(part.capitalize() for part in finding.split("-"))


@dataclass(frozen=True)
class Alert:
    """A finding's expression and annotations, as its definition's `alert` makes them."""

    expr: str
    summary: str
    llmtop: str
    """The llmtop command that opens what the alert is about."""
    doc: str
    """What it mirrors and where it differs from llmtop's check, for the file's comment."""
    action: str = ""
    """"": the finding's own advice, as the check gives it."""
    severity: str | None = None
    """A template choosing the severity by the value; None: the finding's."""
    bottleneck: str | None = None
    """None: the finding's; "" when the expression sets it (degraded-200 names its own)."""
