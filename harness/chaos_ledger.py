"""The chaos run's pure parts: the schedule of faults, each request's one outcome, the ledger's
tallies and their agreement with what each gateway counted, and which faults the recording's
report names. No IO: harness/chaos.py feeds it, tests/reliability/test_chaos_ledger.py checks it.

A request ends in exactly one of:
- served: a 2xx with its whole body (a stream: its `[DONE]` and no error event);
- rejected: a 429 with Retry-After and a JSON body;
- error: any other status with a JSON body, or a stream that ends with an error event and
  `[DONE]` (the gateway's way of failing a stream it already began);
- cancelled: its own client left mid-stream (on purpose);
- lost: anything else (no answer, a cut body, a body that is not what its status says). The
  promise is that none is lost.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

OUTCOMES = ("served", "rejected", "error", "cancelled", "lost")
FAULT_KINDS = (
    "replica-kill",
    "replica-stop",
    "replica-slow",
    "redis-kill",
    "gateway-roll",
    "replica-garbage",
)


@dataclass
class Entry:
    """One request the clients sent: where it went, what came back, its one outcome."""

    id: int
    kind: str
    """plain, stream, cancel (a stream its client leaves), or bad-* (a request refused)."""
    gateway: str
    """The gateway incarnation it was sent to ("gw0#1": the second run of gateway 0)."""
    sent_at: float
    status: int | None = None
    """The status answered (None: no answer's head came)."""
    outcome: str | None = None
    detail: str = ""

    def end(self, outcome: str, detail: str = "") -> None:
        """Its one outcome; a second is a bug of the client, not a request's fate."""
        if self.outcome is not None:
            raise AssertionError(f"request {self.id} ended twice: {self.outcome}, {outcome}")
        if outcome not in OUTCOMES:
            raise AssertionError(f"not an outcome: {outcome!r}")
        self.outcome, self.detail = outcome, detail


def is_json_error(body: bytes) -> bool:
    """An OpenAI-shaped error body: {"error": {...}}."""
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("error"), dict)


def outcome_of_body(status: int, headers: dict[str, str], body: bytes) -> tuple[str, str]:
    """The outcome of an answer read whole (not a stream): (outcome, why when lost)."""
    if 200 <= status < 300:
        try:
            json.loads(body)
        except ValueError:
            return "lost", f"{status} with a body that is not JSON"
        return "served", ""
    if not is_json_error(body):
        return "lost", f"{status} without a JSON error body"
    if status == 429:
        if "retry-after" not in headers:
            return "lost", "429 without Retry-After"
        return "rejected", ""
    return "error", ""


def outcome_of_stream(events: Sequence[bytes]) -> tuple[str, str]:
    """The outcome of a 200 stream read to its end, from its last two `data:` payloads."""
    if not events or events[-1] != b"[DONE]":
        return "lost", "stream ended without [DONE]"
    if len(events) >= 2 and is_json_error(events[-2]):
        return "error", ""
    return "served", ""


# ---- the ledger against the gateways' counts ---------------------------------------------


def admission_outcome(e: Entry) -> str | None:
    """What the gateway's admission counted for a request (None: it never entered admission:
    refused before, oversized, or never reached a gateway)."""
    if e.status is None or e.kind == "bad-large":
        return None
    if e.outcome == "cancelled":
        return "cancelled"
    if e.outcome == "rejected":
        return "rejected"  # rejected and timed_out, summed
    if e.outcome == "error" and (e.status >= 500 or e.status == 200):
        return "upstream_error"
    return "completed"  # served, or a 4xx the engine answered (relayed whole)


@dataclass
class Tally:
    """What one gateway incarnation was sent, by status and by admission outcome."""

    answers: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)


def tallies(entries: Iterable[Entry]) -> dict[str, Tally]:
    """The clients' ledger per gateway incarnation, in the gateways' own terms."""
    out: dict[str, Tally] = {}
    for e in entries:
        if e.status is None:
            continue  # never answered: no gateway counted it, and it is lost
        t = out.setdefault(e.gateway, Tally())
        t.answers[str(e.status)] += 1
        a = admission_outcome(e)
        if a is not None:
            t.outcomes[a] += 1
    return out


def gateway_tally(counts: Mapping[str, object]) -> Tally:
    """A gateway's `stopped:` line (llmtop/gateway/server/app.py final_counts) as a Tally."""
    answers = counts.get("answers", {})
    outcomes = counts.get("outcomes", {})
    assert isinstance(answers, dict)
    assert isinstance(outcomes, dict)
    t = Tally(Counter({k: int(v) for k, v in answers.items() if int(v)}))
    for k, v in outcomes.items():
        key = "rejected" if k in ("rejected", "timed_out") else str(k)
        if int(v):
            t.outcomes[key] += int(v)
    return t


def disagreements(clients: dict[str, Tally], gateways: dict[str, Tally]) -> list[str]:
    """Where the clients' ledger and a gateway's counts differ (empty: request for request)."""
    out = []
    for name in sorted(set(clients) | set(gateways)):
        c, g = clients.get(name, Tally()), gateways.get(name)
        if g is None:
            out.append(f"{name}: no counts from the gateway (did it stop cleanly?)")
            continue
        if c.answers != g.answers:
            out.append(f"{name}: answers clients {dict(c.answers)} != gateway {dict(g.answers)}")
        if c.outcomes != g.outcomes:
            out.append(f"{name}: outcomes clients {dict(c.outcomes)} != gateway {dict(g.outcomes)}")
    return out


# ---- the schedule ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Injection:
    """One fault: what, on which part, when (seconds into the load) and for how long."""

    at_s: float
    kind: str
    target: int
    """The replica or gateway index (0 for Redis)."""
    for_s: float


def schedule(load_s: float, rounds: int) -> list[Injection]:
    """Every fault once per round, rounds spread over the load; the second round hits the
    other replica and the other gateway. A round needs 60 s."""
    if load_s < 60 * rounds:
        raise ValueError(f"{rounds} round(s) of faults need {60 * rounds} s of load, got {load_s}")
    span = load_s / rounds
    out = []
    for r in range(rounds):
        t0 = r * span + 2.0
        a, b = r % 2, 1 - r % 2
        out += [
            Injection(t0, "replica-kill", a, 4.0),
            Injection(t0 + 7, "replica-stop", b, 12.0),
            Injection(t0 + 16, "redis-kill", 0, 5.0),
            Injection(t0 + 29, "replica-slow", a, 12.0),
            Injection(t0 + 38, "gateway-roll", r % 2, 0.0),
            Injection(t0 + 46, "replica-garbage", b, 10.0),
        ]
    return out


# ---- the report names each fault ---------------------------------------------------------

NAMED_BY: dict[str, tuple[str, ...]] = {
    "replica-kill": ("target-down", "replica-down", "replica-out-of-rotation"),
    "replica-stop": ("target-down", "replica-down", "stale-data", "replica-out-of-rotation"),
    "replica-slow": ("replica-slow",),
    "redis-kill": ("gateway-shared-limits-lost",),
    "gateway-roll": ("gateway-down", "gateway-peer-draining", "gateway-peer-lost"),
    "replica-garbage": ("replica-out-of-rotation",),
}
"""The findings of `llmtop report` that name each fault. The console watches both replicas and
the first gateway: a killed or hung replica stops answering its /metrics (replica-down) and
leaves the gateway's rotation; one answering garbage leaves the rotation only (its /metrics
answer); one 5x slower is seen in the gateway's timing of its streams (replica-slow: the
engines' histograms take a window to show it); Redis away is the gateway's fallback; the
watched gateway rolled stops answering (gateway-down). The other one's roll (the second round
of a run of 240 s or more) is named by the watched gateway's count of draining peers, from the
rolled one's next sync after its SIGTERM (gateway-peer-draining); gateway-peer-lost names one
that stays gone (docs/reliability.md)."""


WITHIN_S: dict[str, float] = {"replica-slow": 8.0}
"""How long after its start each fault may take to be named (5 s unless listed). replica-slow
reads the gateway's timing of the replica's streams from their heads: when the fault lands
while its requests await their first tokens, those come at the slow pace too, and its rate is
unknown for up to ~3 s more (a suite run named it at +5.4 s; docs/reliability.md)."""


@dataclass(frozen=True)
class Named:
    injection: Injection
    at: float
    """When the fault started (epoch seconds)."""
    finding: str | None
    delay_s: float | None


def named(
    injections: Sequence[tuple[Injection, float, str | None]],
    findings: Sequence[dict[str, object]],
    within_s: float | None = None,
) -> list[Named]:
    """For each fault (its injection, epoch start, the URL it hit when it has one), the first
    finding of the report that names it within `within_s` (else its WITHIN_S, else 5 s) of its
    start."""
    out = []
    for inj, at, url in injections:
        best: tuple[float, str] | None = None
        window = within_s if within_s is not None else WITHIN_S.get(inj.kind, 5.0)
        for f in findings:
            fid, fired = str(f["id"]), float(str(f["fired"]))
            if fid not in NAMED_BY[inj.kind] or not at - 1.0 <= fired <= at + window:
                continue
            text = f"{f.get('summary', '')} {f.get('action', '')}"
            if url is not None and fid != "gateway-down" and url.split("//")[-1] not in text:
                continue
            if best is None or fired < best[0]:
                best = (fired, fid)
        out.append(
            Named(inj, at, best[1] if best else None, None if best is None else best[0] - at)
        )
    return out
