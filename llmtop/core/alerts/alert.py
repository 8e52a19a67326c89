"""One alerting rule, made from a health rule's row: its id, class and whether it holds before
firing come from the row the TUI evaluates (`core.health.health.RULES`, `FLEET_RULES`), so an
alert cannot name a finding llmtop does not have or class it differently. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmtop.core.health.health import RULES
from llmtop.core.health.rulebase import Rule
from llmtop.core.health.rules_fleet import FLEET_RULES

_ALL: tuple[Rule[Any], ...] = (*RULES, *FLEET_RULES)
ROWS: dict[str, Rule[Any]] = {r.id: r for r in _ALL}
"""Every finding llmtop has, by id: the engine, edge and fleet rules."""


def alert_name(finding: str) -> str:
    """kv-exhausted -> LlmtopKvExhausted (degraded-200 -> LlmtopDegraded200)."""
    return "Llmtop" + "".join(part.capitalize() for part in finding.split("-"))


@dataclass(frozen=True)
class Alert:
    """An alerting rule for one finding."""

    finding: str
    expr: str
    summary: str
    action: str
    llmtop: str
    """The llmtop command that opens what the alert is about."""
    doc: str
    """What it mirrors and where it differs from llmtop's rule, for the file's comment."""
    severity: str | None = None
    """A template choosing the severity by the value; None: the row's."""
    bottleneck: str | None = None
    """None: the row's; "" when the expression sets it (degraded-200 names its own)."""

    @property
    def row(self) -> Rule[Any]:
        return ROWS[self.finding]

    @property
    def name(self) -> str:
        return alert_name(self.finding)

    @property
    def immediate(self) -> bool:
        return self.row.immediate

    def labels(self) -> dict[str, str]:
        out = {"severity": self.severity or self.row.severity}
        bottleneck = self.row.bottleneck if self.bottleneck is None else self.bottleneck
        if bottleneck:
            out["bottleneck"] = bottleneck
        out["finding"] = self.finding
        return out
