"""A server's drain after SIGTERM, as state on an injected clock: ready, then a grace in which
new requests are still served while readiness fails, then no new connections and what is in
flight given up to a timeout, then cut.

Why a grace: a load balancer (a Kubernetes Service, an ingress) learns of the drain from a
failing readiness check, some seconds later; refusing connections at once would fail the
requests it still sends meanwhile. The phases, from the first signal:

- `ready` until the first SIGTERM or SIGINT;
- `grace` for `grace_s` after a SIGTERM (none after a SIGINT: a person at a terminal has no
  balancer to tell): readiness fails, everything is still served;
- `closing` for `timeout_s`: the listener is closed, requests in flight finish;
- `cut` after that, or at once on a second signal: what is still in flight is ended by its
  server (an error event on a stream), never left to a bare cancellation.

Pure: the signal handler calls `begin`/`force`; the server's loop reads the phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Phase = Literal["ready", "grace", "closing", "cut"]


@dataclass
class Drain:
    """When a draining server stops accepting and when it cuts what is left."""

    grace_s: float = 5.0
    timeout_s: float = 120.0
    clock: Callable[[], float] = time.monotonic
    signalled_at: float | None = None
    """When the first signal came (the clock's seconds); None while ready."""
    signal_name: str | None = None
    accept_until: float = float("inf")
    """New connections are accepted until then."""
    cut_at: float = float("inf")
    """What is in flight then is cut."""
    forced: bool = False
    """A second signal cut it short."""

    def __post_init__(self) -> None:
        if not (0 <= self.grace_s < float("inf") and 0 <= self.timeout_s < float("inf")):
            raise ValueError(
                f"drain_grace_s and drain_timeout_s must be 0 or more seconds, got "
                f"{self.grace_s:g} and {self.timeout_s:g}"
            )

    @property
    def ready(self) -> bool:
        return self.signalled_at is None

    def begin(self, signal_name: str, *, grace: bool = True) -> None:
        """The first signal: readiness fails now; accepting ends after the grace (if any)."""
        if self.signalled_at is not None:
            return
        now = self.clock()
        self.signalled_at = now
        self.signal_name = signal_name
        self.accept_until = now + (self.grace_s if grace else 0.0)
        self.cut_at = self.accept_until + self.timeout_s

    def force(self) -> None:
        """A second signal: stop accepting and cut what is in flight, now."""
        now = self.clock()
        if self.signalled_at is None:
            self.signalled_at = now
        self.forced = True
        self.accept_until = min(self.accept_until, now)
        self.cut_at = min(self.cut_at, now)

    def phase(self) -> Phase:
        if self.signalled_at is None:
            return "ready"
        now = self.clock()
        if now >= self.cut_at:
            return "cut"
        if now >= self.accept_until:
            return "closing"
        return "grace"

    def accepting(self) -> bool:
        return self.phase() in ("ready", "grace")

    def cut_reason(self) -> str:
        """What a request cut by this drain is told."""
        if self.forced:
            return "the gateway is shutting down now (a second signal)"
        return f"the gateway is shutting down: drain_timeout_s ({self.timeout_s:g} s) is over"

    def to_dict(self) -> dict[str, object]:
        """The readiness document: {"ready", "phase", and while draining the seconds since
        the signal, to the end of accepting and to the cut}."""
        phase = self.phase()
        out: dict[str, object] = {"ready": phase == "ready", "phase": phase}
        if self.signalled_at is not None:
            now = self.clock()
            out["signal"] = self.signal_name
            out["since_s"] = round(now - self.signalled_at, 3)
            out["accepting_for_s"] = round(max(0.0, self.accept_until - now), 3)
            out["cut_in_s"] = round(max(0.0, self.cut_at - now), 3)
        return out


__all__ = ["Drain", "Phase"]
