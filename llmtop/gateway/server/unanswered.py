"""The age of what is waiting now: the oldest request queued in the gateway, and the oldest
admitted one the engine has not yet answered (no first byte).

vLLM's TTFT histogram records a request only when its first token comes, so a request stuck
for 50 s is invisible there until it finally starts. The gateway sees it at once: each
generation request is tracked from its arrival until its first byte (or its end), and the ages
are read at scrape time (a scan of the requests waiting now; the hot path only adds and pops).
A queued request's age counts from its arrival; an admitted one's from its admission, so it is
the engine's delay alone (a request that waited in the gateway's queue by design is not an
engine stuck on it; the queue's own age is `oldest_queued_s`).
"""

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
