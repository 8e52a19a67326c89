"""The two look-backs the KV rules read each poll, kept as the pipeline keeps snapshots. Pure.
`kv_peak`: the highest KV use over the rules' window, the latest kept snapshot's included (polls
a window apart still compare); `held`: the most KV tokens a running sequence held over
`SIZE_LOOKBACK_S`. A reader of bare snapshots builds one (`of_history`): one definition for all.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmtop.core.base.snapshot import Snapshot
from llmtop.core.derive.sliding_max import SlidingMax

SIZE_LOOKBACK_S = 60.0
"""How far back `kv_size` looks for the most KV a running sequence held: long enough to span
a long prompt's life (its prefill, its answer), so one wave of them finishing does not make a
few short chats the measure of a slot."""


class KvMaxima:
    """The KV peak and the most KV held per running sequence, per engine URL."""

    def __init__(self, window_s: float, history_s: float = float("inf")) -> None:
        self.kv_usage: SlidingMax[None] = SlidingMax(min(window_s, history_s))
        """KV use 0..1 over the rules' window (never past the history the pipeline keeps)."""
        self.held: SlidingMax[tuple[float, float]] = SlidingMax(min(SIZE_LOOKBACK_S, history_s))
        """KV tokens per running sequence, with (usage, running) of its row."""
        self.latest: float | None = None
        """Time of the latest snapshot kept."""

    def keep(self, snap: Snapshot) -> None:
        """The pipeline has kept `snap` (its newest)."""
        t = snap.time
        for p in snap.engines:
            if not p.up:
                continue
            usage = p.kv_cache_usage_frac
            if usage is not None:
                self.kv_usage.add(p.url, t, usage, None)
            tokens = p.kv_tokens_per_running
            if tokens is not None:
                self.held.add(p.url, t, tokens, (usage or 0.0, p.running or 0.0))
        self.latest = t

    @classmethod
    def of_history(cls, history: Sequence[Snapshot], window_s: float) -> KvMaxima:
        """KvMaxima over snapshots held elsewhere (oldest first): the last `window_s` or
        `SIZE_LOOKBACK_S` of them, whichever is longer, and the latest."""
        made = cls(window_s)
        if history:
            since = history[-1].time - max(window_s, SIZE_LOOKBACK_S)
            start = len(history) - 1
            while start > 0 and history[start - 1].time >= since:
                start -= 1
            for snap in list(history)[start:]:
                made.keep(snap)
        return made
