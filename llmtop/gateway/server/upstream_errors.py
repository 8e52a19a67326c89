"""Upstream failures by reason: vLLM's own refusals told apart from its faults. vLLM 0.32 answers
503 when its frontend queue (`--max-num-queued-reqs`: "The engine is currently busy and cannot
accept new requests") or its prefill backlog (`--max-num-queued-tokens`: "...reached its prefill
token backlog limit") is full; the sim says "max_num_queued_reqs=N". Load shedding, retryable
elsewhere: passed on as 503, apart from engine errors (other 5xx), a down engine, timeouts."""

from __future__ import annotations

from collections import Counter

QUEUE_FULL = "engine_queue_full"
TOKEN_BACKLOG = "engine_token_backlog"
REFUSALS = {QUEUE_FULL: "--max-num-queued-reqs", TOKEN_BACKLOG: "--max-num-queued-tokens"}
"""vLLM's own refusals -> the vLLM flag that sets the limit."""

_QUEUE_FULL_TEXT = (b"currently busy and cannot accept new requests", b"max_num_queued_reqs")
_BACKLOG_TEXT = (b"prefill token backlog", b"max_num_queued_tokens")


def classify(status: int, body: bytes) -> str:
    """The reason of an upstream 5xx from its status and the start of its body."""
    if status == 503:
        if any(t in body for t in _QUEUE_FULL_TEXT):
            return QUEUE_FULL
        if any(t in body for t in _BACKLOG_TEXT):
            return TOKEN_BACKLOG
        return "engine_unavailable"
    return "engine_error"


class UpstreamErrors:
    """Counts of upstream failures by (reason, upstream status; "none" without a response)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def record(self, reason: str, status: int | None = None) -> None:
        self.counts[(reason, "none" if status is None else str(status))] += 1

    def by_reason(self) -> dict[str, int]:
        """Reason -> count, for /admin/stats."""
        out: Counter[str] = Counter()
        for (reason, _), n in self.counts.items():
            out[reason] += n
        return dict(out)
