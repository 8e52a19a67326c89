"""The prefill budget: prompt tokens admitted and not yet prefilled, held to what the engine
prefills in `prefill_horizon_s` at its measured rate, so a newly admitted request's TTFT stays
near a lone one's. Counted by admission request by request (no scrape lag). Pure."""

from __future__ import annotations

from llmtop.gateway.autopilot.config import AutopilotConfig
from llmtop.gateway.autopilot.status import blocks_text

MEASURING = "measuring the prefill rate: one new prompt at a time"


class PrefillBudget:
    """The prefill budget applied (tokens; None: not set by the autopilot) and why."""

    def __init__(self, config: AutopilotConfig) -> None:
        self.config = config
        self.applied: int | None = None
        self.reason = MEASURING

    def update(self, rate: float | None, backlog: int) -> int | None:
        """The budget for the measured rate (prompt tokens per busy second); a new value only
        when it drifted past the deadband. Before a rate: 1 token, which admits a prompt only
        when nothing is left to prefill (one at a time until the first answers)."""
        c = self.config
        if rate is None:
            want = 1
            self.reason = MEASURING
        else:
            want = max(1, round(rate * c.prefill_horizon_s))
            self.reason = (
                f"{blocks_text(rate)} prompt tok/s prefilled x {c.prefill_horizon_s:g}s;"
                f" {blocks_text(backlog)} tokens not yet prefilled"
            )
        old = self.applied
        if old is not None and abs(want - old) <= c.prefill_deadband * max(old, 1):
            return None
        self.applied = want
        return want
