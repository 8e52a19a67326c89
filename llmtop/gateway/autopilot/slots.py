"""The autopilot in front of an engine that exports no KV figure (llama.cpp's `llama-server`,
TGI, LMDeploy): it admits by the engine's slots, learned from its own /metrics (the most it ran,
known once requests waited inside it, deferred behind busy slots), and by the TTFT the gateway
measures itself. Pure. The excess then waits in the gateway's queue, with its deadline and its
429, rather than unseen behind the slots.

Two ways the slots could be learned short, each closed: a gateway cap at or under the engine's
slots never lets a request wait inside it (so while the slots are unknown the cap is lifted,
`LEARNING_CAP`); and a scrape taken as a finished slot is refilled reads one slot short (so with
every slot busy and requests queued at the gateway, one more is tried now and then)."""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.derive.signals import EngineSignals

LEARNING_CAP = 1024
"""The cap while the slots are unknown: the engine's own queue shows them (as without a
gateway, for the scrape or two it takes)."""
PROBE_EVERY = 30
"""Steps between tries of one more slot than learned (each may defer one request a scrape)."""


@dataclass
class Slots:
    """The cap by slots: at the slots learned, one lower while the engine's share of TTFT is
    over its part of the SLO with nothing waiting inside, back up one a step while it is not."""

    slots: int | None = None
    """The most requests the engine ran, known once others waited inside it (its slots)."""
    cap: int | None = None
    """The cap this step sets (None until the slots are known)."""
    reason: str = "learning the engine's slots: no KV figure in its /metrics"
    most: int = 0
    """The most requests it was seen running, waiting or not (a floor for its slots)."""
    since_probe: int = 0
    """Steps since one more slot than learned was last tried."""
    told: int | None = None
    """The slots the engine says it has (llama-server's /props `total_slots`, every replica
    added), taken at once: no learning, no lifted cap."""

    def step(
        self,
        sig: EngineSignals,
        engine_ttft_s: float,
        ttft_budget_s: float,
        engine: str = "the engine",
        queued: int = 0,
    ) -> int | None:
        """The cap for this scrape interval (`LEARNING_CAP` while the slots are unknown), or
        None to hold (running or waiting unknown); `reason` says which and why, naming the
        `engine` (its title: llama.cpp). `queued`: requests waiting at the gateway."""
        running, waiting = sig.running, sig.waiting
        if running is None or waiting is None:
            self.reason = "holding: the engine's running and waiting counts are unknown"
            return None
        self.most = max(self.most, int(running))
        if self.told is not None and (self.slots is None or self.slots < self.told):
            self.slots = self.told
        if waiting > 0 and running >= 1:
            self.slots = max(self.slots or 0, self.most)
        elif self.slots is not None and running > self.slots:
            self.slots = int(running)  # a tried slot more was taken: it has it
        if self.slots is None:
            self.reason = (
                f"no KV figure in {engine}'s /metrics: the cap follows its slots once requests "
                f"wait inside it ({running:.0f} running, none waiting yet)"
            )
            return LEARNING_CAP
        over = engine_ttft_s > ttft_budget_s
        cap = self.slots if self.cap is None else min(self.cap, self.slots + 1)
        self.since_probe += 1
        tried = ""
        if cap > self.slots and (waiting > 0 or over):
            cap = self.slots  # the slot tried was not there (a request deferred), or TTFT over
        elif over and waiting == 0 and cap > 1:
            cap -= 1
        elif not over and cap < self.slots:
            cap += 1
        elif (
            cap == self.slots
            and not over
            and waiting == 0
            and running >= self.slots
            and queued > 0
            and self.since_probe >= PROBE_EVERY
        ):  # every slot busy, requests queued here: one more, in case a scrape read one short
            cap, self.since_probe = self.slots + 1, 0
            tried = "; trying one more"
        self.cap = cap
        said = " as its info endpoint says" if self.told == self.slots else ""
        self.reason = (
            f"cap {cap}: admits by {engine}'s {self.slots} slots{said} (no KV figure in its "
            f"/metrics){tried}, engine TTFT {engine_ttft_s:.1f}s measured here "
            f"{'over' if over else 'within'} {ttft_budget_s:.1f}s"
        )
        return cap
