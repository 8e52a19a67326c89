"""The age of what is waiting now: the oldest request queued in the gateway, and the oldest admitted
one the engine has not answered (no first byte), which vLLM's TTFT histogram cannot show until its
first token. Each generation request is tracked from arrival to first byte (the hot path only adds
and pops; the ages are a scan at scrape time). A queued age counts from arrival, an admitted one
from admission: the engine's delay alone (the queue's own age is `oldest_queued_s`)."""

from __future__ import annotations


class Unanswered:
    """Generation requests without a first byte yet, by key, with their arrival times."""

    def __init__(self) -> None:
        self._queued: dict[int, float] = {}
        self._admitted: dict[int, float] = {}

    def queued(self, key: int, arrived: float) -> None:
        """The request waits in the gateway's queue."""
        self._queued[key] = arrived

    def admitted(self, key: int, admitted: float) -> None:
        """The request went to the engine (from the queue, or at once) at `admitted`."""
        self._queued.pop(key, None)
        self._admitted[key] = admitted

    def answered(self, key: int) -> None:
        """First byte, or the request ended (answered, refused, failed, cancelled)."""
        self._queued.pop(key, None)
        self._admitted.pop(key, None)

    def oldest_queued_s(self, now: float) -> float | None:
        """Age of the oldest request waiting in the gateway; None when none waits."""
        return now - min(self._queued.values()) if self._queued else None

    def oldest_admitted_s(self, now: float) -> float | None:
        """Age of the oldest request at the engine still without a first byte; None if none."""
        return now - min(self._admitted.values()) if self._admitted else None
