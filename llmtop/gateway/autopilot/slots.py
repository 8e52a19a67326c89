"""The autopilot in front of an engine that exports no KV figure (llama.cpp's `llama-server`,
TGI): it admits by the engine's slots, learned from its own /metrics (the running count while
requests wait inside it, deferred behind busy slots), and by the TTFT the gateway measures
itself. Pure. The excess then waits in the gateway's queue, with its deadline and its 429,
rather than unseen behind the slots."""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.derive.signals import EngineSignals


@dataclass
class Slots:
    """The cap by slots: at the slots learned, one lower while the engine's share of TTFT is
    over its part of the SLO with nothing waiting inside, back up one a step while it is not."""

    slots: int | None = None
    """The most requests the engine ran while others waited inside it (its slots)."""
    cap: int | None = None
    """The cap this step sets (None until the slots are known)."""
    reason: str = "learning the engine's slots: no KV figure in its /metrics"

    def step(
        self,
        sig: EngineSignals,
        engine_ttft_s: float,
        ttft_budget_s: float,
        engine: str = "the engine",
    ) -> int | None:
        """The cap for this scrape interval, or None to hold (running or waiting unknown, or no
        request has waited inside the engine yet); `reason` says which and why, naming the
        `engine` (its title: llama.cpp)."""
        running, waiting = sig.running, sig.waiting
        if running is None or waiting is None:
            self.reason = "holding: the engine's running and waiting counts are unknown"
            return None
        if waiting > 0 and running >= 1:
            self.slots = max(self.slots or 0, int(running))
        if self.slots is None:
            self.reason = (
                f"no KV figure in {engine}'s /metrics: the cap follows its slots once requests "
                f"wait inside it ({running:.0f} running, none waiting yet)"
            )
            return None
        over = engine_ttft_s > ttft_budget_s
        cap = self.slots if self.cap is None else self.cap
        if over and waiting == 0 and cap > 1:
            cap -= 1
        elif not over and cap < self.slots:
            cap += 1
        cap = min(cap, self.slots)
        self.cap = cap
        self.reason = (
            f"cap {cap}: admits by {engine}'s {self.slots} slots (no KV figure in its "
            f"/metrics), engine TTFT {engine_ttft_s:.1f}s measured here "
            f"{'over' if over else 'within'} {ttft_budget_s:.1f}s"
        )
        return cap
