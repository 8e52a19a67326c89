"""Which replica an admitted request goes to, and which are out for a while. Pure (an injected
clock), fed by `done` (the proxy), `probed` and `replicas` (the app's /health and /metrics). The
choice: the most KV headroom, then the shortest engine queue, the fewest outstanding, the least
recently picked; one at its own cap is skipped. A refused connection, a timeout, a 5xx or no /health
answer for `deadline_s` (a hang) ejects it for `eject_s`, then until a probe answers (`events`).
Replicas may come and go (`follow`: a feed of the Ready pods): a new one awaits its first /health
answer, one that left drains (nothing new is sent; what it holds finishes) and is then removed."""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

HEADROOM_STEP = 0.05
"""KV-use fractions closer than this count as a tie."""
OK, EJECTED, PROBING, DRAINING = "ok", "ejected", "probing", "draining"
RATE_WINDOW_S = 1.0
"""A replica's token rate per request is read over about this many seconds..."""
RATE_MIN_REQUEST_S = 0.5
"""...of at least this many request-seconds (fewer: not known)."""
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_SAMPLE_S = 0.25
"""How often a meter's totals are kept (the window's ends fall on these)."""


@dataclass
class TokenMeter:
    """One replica's answers as the relay sees them: the tokens passed on (`events`: a stream's
    events, added to by the relay per chunk; a whole answer's completion tokens at its end)
    and the request-seconds they took (streams from their head to their end; a whole answer's
    time at the replica, at its end), read over a window of samples."""

    clock: Callable[[], float] = time.monotonic
    events: int = 0
    active: int = 0
    """Streams whose head came and that have not ended."""
    request_s: float = 0.0
    since: float | None = None
    samples: deque[tuple[float, int, float]] = field(default_factory=lambda: deque(maxlen=16))
    """(time, events, request-seconds) every _SAMPLE_S at most."""

    def _advance(self) -> float:
        now = self.clock()
        if self.since is not None:
            self.request_s += self.active * (now - self.since)
        self.since = now
        return now

    def begin(self) -> None:
        """A stream's head came."""
        self.sample()
        self.active += 1

    def end(self) -> None:
        """A stream that had begun ended (whole or not)."""
        self.sample()
        self.active -= 1

    def answered(self, tail: bytes, seconds: float) -> None:
        """A whole answer (not a stream) ended after `seconds` at the replica: its completion
        tokens (read from its last chunk, where the usage is) count as events over that time,
        at its end. An answer without a usage there says nothing."""
        found = _COMPLETION_TOKENS.search(tail)
        if found is None or seconds <= 0:
            return
        self.sample()
        self.events += int(found.group(1))
        self.request_s += seconds

    def sample(self) -> None:
        """Keep the totals now, at most every _SAMPLE_S."""
        now = self._advance()
        if not self.samples or now - self.samples[-1][0] >= _SAMPLE_S:
            self.samples.append((now, self.events, self.request_s))

    def rate(self) -> tuple[float | None, float]:
        """Events per request-second over the last RATE_WINDOW_S (None: too few request-seconds
        to say), and the request-seconds it is of."""
        self.sample()
        now = self.samples[-1][0]
        start = next(s for s in self.samples if now - s[0] <= RATE_WINDOW_S)
        span = self.request_s - start[2]
        if span < RATE_MIN_REQUEST_S:
            return None, span
        return (self.events - start[1]) / span, span


@dataclass
class Replica:
    """One upstream as the balancer sees it."""

    url: str
    in_flight: int = 0
    kv_in_flight: int = 0
    sent: int = 0
    """Attempts sent to it since start (its share is sent over the replicas' total)."""
    failures: int = 0
    capacity_blocks: int | None = None
    """KV capacity from its /metrics (vllm:cache_config_info); None before the first read."""
    waiting: float = 0.0
    """Its engine queue (vllm:num_requests_waiting) at the last read."""
    state: str = OK
    ejected_until: float = 0.0
    last_error: str | None = None
    healthy: bool | None = None
    """None before the first answer or probe."""
    last_pick: int = 0
    """When it was last given a request (a counter): full ties go to the least recent."""
    out_since: float | None = None
    """When it left rotation, while it is out (the clock's seconds; None in rotation)."""
    back_at: float | None = None
    """When it last came back into rotation (None: never out, or out now). Not set when it
    comes up for the first time: an engine still loading when the gateway started was never
    in service, so it is not back from anything (replica-out-of-rotation holds while it is
    out, not for the 10 s after it first answers)."""
    served: bool = False
    """It has answered a request or a probe."""
    meter: TokenMeter = field(default_factory=TokenMeter)
    """Its answers' tokens and time (the relay's), on the balancer's clock."""

    def kv_used_frac(self, extra_blocks: int) -> float:
        if not self.capacity_blocks:
            return 0.0
        return (self.kv_in_flight + extra_blocks) / self.capacity_blocks


@dataclass(frozen=True)
class ReplicaEvent:
    """A replica went out of rotation or came back."""

    time: float
    url: str
    change: Literal["out", "back", "up", "added", "draining", "removed"]
    """up: in rotation at its first answer (it had not served before it went out). added: a
    feed (`follow`) named it, it awaits its first /health answer; draining: the feed dropped it
    while it held requests (nothing new goes to it); removed: gone from the replicas."""
    reason: str | None = None


@dataclass
class Balancer:
    """The replicas, the choice and the ejections."""

    urls: Sequence[str]
    eject_s: float = 5.0
    max_per_replica: int | None = None
    clock: Callable[[], float] = time.monotonic
    deadline_s: float = 2.0
    """A replica in rotation whose /health is unanswered this long is ejected (a hang)."""
    replicas: list[Replica] = field(init=False)
    events: deque[ReplicaEvent] = field(init=False)
    """The last 200 moves out of rotation and back, oldest first."""

    allow_empty: bool = False
    """A feed decides the replicas (`follow`): none at all is a state, not a mistake."""

    def __post_init__(self) -> None:
        if not self.urls and not self.allow_empty:
            raise ValueError("at least one upstream is needed")
        if not 0 < self.deadline_s < float("inf"):
            raise ValueError(f"replica_deadline_s must be > 0 seconds, got {self.deadline_s:g}")
        self.replicas = [Replica(u.rstrip("/"), meter=TokenMeter(self.clock)) for u in self.urls]
        self.events = deque(maxlen=200)
        self.events_total = 0
        """Events since start (those older than the last 200 are gone from `events`)."""
        self._picks = 0

    def _event(self, event: ReplicaEvent) -> None:
        self.events.append(event)
        self.events_total += 1

    def eligible(self) -> list[Replica]:
        """Replicas that may take a request now (not ejected, not awaiting a probe)."""
        self._tick()
        return [r for r in self.replicas if r.state == OK]

    def capacity(self) -> int | None:
        """Requests the live replicas may hold together (None: no per-replica limit)."""
        if self.max_per_replica is None:
            return None
        return self.max_per_replica * (len(self.eligible()) or len(self.serving()))

    def serving(self) -> list[Replica]:
        """Replicas that are not draining: panic routing's candidates."""
        return [r for r in self.replicas if r.state != DRAINING]

    def follow(self, urls: Iterable[str]) -> None:
        """Make the replicas the set `urls` (a feed's current upstreams). A new one (or one
        that comes back while draining) awaits its first /health answer before any traffic
        (`added`); one no longer named drains: nothing new is sent to it, what it holds
        finishes, and it is removed when that is done (`draining`, then `removed`; at once
        when it holds nothing)."""
        wanted = list(dict.fromkeys(u.rstrip("/") for u in urls))
        have = {r.url: r for r in self.replicas}
        now = self.clock()
        for url in wanted:
            r = have.get(url)
            if r is None:
                r = Replica(url, state=PROBING, meter=TokenMeter(self.clock))
                r.out_since = now
                self.replicas.append(r)
                self._event(ReplicaEvent(now, url, "added"))
            elif r.state == DRAINING:
                r.state, r.out_since, r.back_at = PROBING, now, None
                self._event(ReplicaEvent(now, url, "added", "named again while draining"))
        keep = set(wanted)
        for r in list(self.replicas):
            if r.url in keep or r.state == DRAINING:
                continue
            if r.in_flight > 0:
                r.state = DRAINING
                r.out_since = r.out_since if r.out_since is not None else now
                r.back_at = None
                self._event(ReplicaEvent(now, r.url, "draining", f"{r.in_flight} in flight"))
            else:
                self._remove(r, "it left")

    def _holds(self, r: Replica) -> bool:
        return any(x is r for x in self.replicas)

    def _remove(self, r: Replica, why: str) -> None:
        self.replicas = [x for x in self.replicas if x is not r]
        self._event(ReplicaEvent(self.clock(), r.url, "removed", why))

    def pick(self, kv_blocks: int = 0, exclude: Sequence[Replica] = ()) -> Replica | None:
        """The replica for a request of `kv_blocks`; None when none may take it. When every
        replica is out, all are candidates (Envoy's panic routing): one upstream that failed
        once must not refuse everything for eject_s."""
        cap = self.max_per_replica
        best: Replica | None = None
        best_key: tuple[float, float, int, int] | None = None
        for r in self.eligible() or self.serving():
            if r in exclude or (cap is not None and r.in_flight >= cap):
                continue
            used = round(r.kv_used_frac(kv_blocks) / HEADROOM_STEP)
            key = (used, r.waiting, r.in_flight, r.last_pick)
            if best_key is None or key < best_key:
                best, best_key = r, key
        return best

    def start(self, r: Replica, kv_blocks: int = 0) -> None:
        r.in_flight += 1
        r.kv_in_flight += kv_blocks
        r.sent += 1
        self._picks += 1
        r.last_pick = self._picks

    def done(self, r: Replica, kv_blocks: int = 0, error: str | None = None) -> None:
        """An attempt ended; `error` (refused, timed out, 5xx) ejects the replica."""
        r.in_flight -= 1
        r.kv_in_flight -= kv_blocks
        if r.state == DRAINING:
            if error is not None:
                self.fail(r, error)  # counted only: it is leaving anyway
            if r.in_flight <= 0 and self._holds(r):
                self._remove(r, "drained")
            return
        if error is None:
            r.healthy = r.served = True
            return
        self.fail(r, error)

    def fail(self, r: Replica, error: str) -> None:
        """Out of rotation for eject_s (an event when it was in rotation); a draining replica
        only counts the failure."""
        if r.state == DRAINING:
            r.failures += 1
            r.last_error = error
            return
        if r.state == OK:
            now = self.clock()
            self._event(ReplicaEvent(now, r.url, "out", error))
            r.out_since, r.back_at = now, None
        r.failures += 1
        r.healthy = False
        r.last_error = error
        r.state = EJECTED
        r.ejected_until = self.clock() + self.eject_s
        r.waiting = 0.0  # its last queue reading is stale now (a restart starts empty)

    def to_probe(self) -> list[Replica]:
        """Replicas whose ejection is over and that await an active /health probe."""
        self._tick()
        return [r for r in self.replicas if r.state == PROBING]

    def to_check(self) -> list[Replica]:
        """Replicas in rotation, whose /health is checked against the deadline."""
        self._tick()
        return [r for r in self.replicas if r.state == OK]

    def probed(self, r: Replica, error: str | None) -> None:
        """A /health answer (or none within the deadline: `error`): in service, or out. An
        answer to a check that left before the replica was ejected does not end the ejection:
        its time runs out first."""
        self._tick()
        if r.state == DRAINING or not self._holds(r):
            return  # it left while the probe was out
        if error is None:
            if r.state == EJECTED:
                return
            if r.state != OK:
                self._event(ReplicaEvent(self.clock(), r.url, "back" if r.served else "up"))
                r.back_at = self.clock() if r.served else None
            r.state, r.healthy, r.served, r.out_since = OK, True, True, None
        else:
            self.fail(r, error)

    def _tick(self) -> None:
        now = self.clock()
        for r in self.replicas:
            if r.state == EJECTED and now >= r.ejected_until:
                r.state = PROBING
            r.meter.sample()

    def to_list(self) -> list[dict[str, Any]]:
        """The replicas for /admin/stats (core.base.admin_api.ReplicaDoc)."""
        self._tick()
        now = self.clock()
        total = sum(r.sent for r in self.replicas)
        out = []
        for r in self.replicas:
            rate, request_s = r.meter.rate()
            out.append(
                {
                    "url": r.url,
                    "state": r.state,
                    "healthy": r.healthy,
                    "in_flight": r.in_flight,
                    "kv_in_flight_blocks": r.kv_in_flight,
                    "capacity_blocks": r.capacity_blocks,
                    "waiting": r.waiting,
                    "sent": r.sent,
                    "share": r.sent / total if total else None,
                    "failures": r.failures,
                    "last_error": r.last_error,
                    "out_for_s": None if r.out_since is None else now - r.out_since,
                    "back_s_ago": None if r.back_at is None else now - r.back_at,
                    "request_tok_per_s": rate,
                    "request_seconds": request_s,
                }
            )
        return out


__all__ = [
    "DRAINING",
    "EJECTED",
    "OK",
    "PROBING",
    "Balancer",
    "Replica",
    "ReplicaEvent",
    "TokenMeter",
]
