"""The gateway's admin API as types: what /admin/stats, /admin/limits and /admin/events carry,
and `LIMITS`, the one table of the gateway's limits (field, command word, type, unit, range).
The gateway serves these documents and the readers parse them; every place that lists the
limits (validation, the TUI's command line and event log, report, snapshot) reads `LIMITS`. Pure.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from llmtop.errors import LimitError


@dataclass(frozen=True)
class LimitSpec:
    """One live limit of the gateway: how it is named, typed, bounded and shown."""

    field: str
    """The JSON field of /admin/limits and the settings' name."""
    word: str
    """The TUI's command word and the event log's label (`cap 8`)."""
    kind: Literal["int", "float", "choice"]
    unit: str
    minimum: float
    """The smallest value allowed (ints: inclusive; floats: exclusive, must be > minimum)."""
    may_be_off: bool
    """None switches it off (`rpm off`)."""
    help: str
    """What it bounds, for --help."""
    choices: tuple[str, ...] = ()
    """The allowed words of a `choice` limit (mode, queue policy)."""

    @property
    def option(self) -> str:
        """The `llmtop gateway` flag: --max-concurrency, --queue-timeout-s (units in the name,
        as in the field)."""
        return "--" + self.field.replace("_", "-")

    @property
    def metavar(self) -> str:
        """N for counts, S for seconds, RPM for the rate, the words of a choice."""
        if self.kind == "choice":
            return "|".join(self.choices)
        return {"s": "S", "requests/min": "RPM"}.get(self.unit, "N")


MODES: tuple[str, ...] = ("manual", "auto", "advise")
"""auto: the autopilot moves the KV and prefill budgets; manual: only people do; advise: the
autopilot computes its budgets and shows them (/admin/stats), the limits stay as people set
them (POST /admin/autopilot/apply sets its suggestion)."""
QUEUE_POLICIES: tuple[str, ...] = ("fifo", "deadline", "codel", "lifo")
"""fifo (timeout only), deadline (reject at arrival / leave when the TTFT budget is gone),
codel (controlled delay) or lifo (adaptive LIFO with codel, as in "Fail at Scale")."""

LIMITS: tuple[LimitSpec, ...] = (
    LimitSpec(
        "max_concurrency", "cap", "int", "requests", 1, False, "requests at the engine at once"
    ),
    LimitSpec("max_queue", "queue", "int", "requests", 0, False, "requests allowed to wait"),
    LimitSpec("queue_timeout_s", "timeout", "float", "s", 0, False, "seconds a request may wait"),
    LimitSpec(
        "rate_limit_rpm", "rpm", "float", "requests/min", 0, True, "requests per minute per tenant"
    ),
    LimitSpec(
        "max_inflight_prompt_tokens",
        "tokens",
        "int",
        "tokens",
        1,
        True,
        "cap on summed prompt tokens in flight",
    ),
    LimitSpec(
        "max_inflight_kv_blocks",
        "blocks",
        "int",
        "KV blocks",
        1,
        True,
        "summed predicted KV footprint in flight (the autopilot moves it)",
    ),
    LimitSpec(
        "max_unprefilled_prompt_tokens",
        "prefill",
        "int",
        "tokens",
        1,
        True,
        "prompt tokens admitted, no first token yet (the autopilot sets it)",
    ),
    LimitSpec("ttft_slo_s", "slo", "float", "s", 0, True, "admission's TTFT budget (an override)"),
    LimitSpec("queue_policy", "policy", "choice", "", 0, False, "queue discipline", QUEUE_POLICIES),
    LimitSpec(
        "mode",
        "mode",
        "choice",
        "",
        0,
        False,
        "auto: the autopilot holds the SLO; advise: it suggests",
        MODES,
    ),
)
LIMIT_FIELDS: tuple[str, ...] = tuple(s.field for s in LIMITS)
"""The limits' field names, in the table's order."""
PAUSED = "paused"
"""The field name /admin/events uses for pause and resume."""


def limit_spec(name: str) -> LimitSpec | None:
    """The limit with this field name or command word, or None."""
    return next((s for s in LIMITS if name in (s.field, s.word)), None)


def check_limit(spec: LimitSpec, value: object) -> int | float | str | None:
    """`value` if it fits the limit's type and range, else a LimitError naming the field."""
    field = spec.field
    tail = " or null" if spec.may_be_off else ""
    if value is None and spec.may_be_off:
        return None
    if spec.kind == "choice":
        if not isinstance(value, str) or value not in spec.choices:
            allowed = ", ".join(spec.choices)
            raise LimitError(field, f"{field} must be one of {allowed}, got {value!r}")
        return value
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < spec.minimum:
            raise LimitError(
                field, f"{field} must be an integer >= {spec.minimum:g}{tail}, got {value!r}"
            )
        return value
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and abs(value) <= sys.float_info.max  # type: ignore[arg-type]  # 10**400: no float
    if not ok or not math.isfinite(float(value)) or float(value) <= spec.minimum:  # type: ignore[arg-type]
        raise LimitError(field, f"{field} must be a number > {spec.minimum:g}{tail}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


_BY_FIELD = {s.field: s for s in LIMITS}


def check_changes(changes: Mapping[str, object]) -> dict[str, int | float | str | None]:
    """A PATCH /admin/limits body checked field by field; LimitError names the first bad one."""
    for field in changes:
        if field not in _BY_FIELD:
            known = ", ".join(sorted(LIMIT_FIELDS))
            raise LimitError(field, f"unknown limit {field!r}; known: {known}")
    return {field: check_limit(_BY_FIELD[field], value) for field, value in changes.items()}


class LimitsDoc(TypedDict):
    """GET and PATCH /admin/limits: the live limits (None: off)."""

    max_concurrency: int
    max_queue: int
    queue_timeout_s: float
    rate_limit_rpm: float | None
    max_inflight_prompt_tokens: int | None
    max_inflight_kv_blocks: int | None
    max_unprefilled_prompt_tokens: int | None
    ttft_slo_s: float | None
    queue_policy: str
    mode: str


class QuantilesDoc(TypedDict):
    """p50 and p95 in seconds over the gateway's window (None: no sample)."""

    p50: float | None
    p95: float | None


class UpstreamDoc(TypedDict):
    """The upstream as the gateway last saw it (healthy None: not yet known)."""

    url: str
    healthy: bool | None
    last_error: str | None


class ReplicaDoc(TypedDict):
    """One upstream replica as the gateway's balancer sees it (gateway/upstreams/balancer.py)."""

    url: str
    state: str
    """ok, ejected (refused, timed out or 5xx'd lately), probing (awaits a /health answer: new
    or back from an ejection) or draining (its pod left: what it holds finishes, nothing new)."""
    healthy: bool | None
    in_flight: int
    kv_in_flight_blocks: int
    capacity_blocks: int | None
    waiting: float
    sent: int
    share: float | None
    """Its part of all requests sent so far (None before the first)."""
    failures: int
    last_error: str | None
    out_for_s: float | None
    """Seconds since it left rotation, while it is out (None: in rotation)."""
    back_s_ago: float | None
    """Seconds since it came back into rotation (None: never out, or out now): a replica
    that fails, is probed back and fails again is out most of the time, though each turn
    is short."""
    request_tok_per_s: float | None
    """Its tokens per request-second over the last 1 s: a stream's events per second from its
    head to its end (the wait for its first token included; running ones too), a whole
    answer's completion tokens over its time at the replica, at its end (None: under half a
    request-second to say)."""
    request_seconds: float
    """The request-seconds that rate is of."""


class SharedDoc(TypedDict, total=False):
    """Limits shared by several gateways (gateway/upstreams/shared.py); backend local when alone."""

    backend: str
    status: str
    """ok, or fallback: Redis unreachable, this gateway holds its share (limit / live)."""
    url: str
    gateway_id: str
    live_gateways: int
    draining_gateways: int | None
    """The other gateways draining (SIGTERM) at the last sync; None while Redis is away."""
    share_slots: int | None
    share_kv_blocks: int | None
    global_in_flight: int | None
    """Slots held by all gateways together at the last sync."""
    global_kv_blocks: int | None
    fallbacks: int
    last_error: str | None


class SloDoc(TypedDict):
    """The SLO as the gateway admits to it, and what its deadline queue derives from it."""

    ttft_s: float
    """The SLO the gateway read ([slo] ttft_s): what every judge of llmtop works to."""
    itl_s: float
    admission_ttft_s: float | None
    """The TTFT budget admission works to (limits.ttft_slo_s): ttft_s, unless changed live
    (an override for admission only); None: off."""
    engine_ttft_s: float
    """The engine's recent TTFT: the margin a request's budget keeps for the engine."""
    queue_budget_s: float | None
    """Seconds a request may wait queued: admission_ttft_s less engine_ttft_s; None when off
    or when the queue policy keeps no deadlines (fifo)."""
    tenant_ttft_s: dict[str, float]
    """Per-tenant TTFT budgets ([gateway] tenant_ttft_slo_s): overrides for admission only."""


class StatsDoc(TypedDict, total=False):
    """GET /admin/stats. total=False: a reader meets older gateways and must not trust a key."""

    time: float
    in_flight: int
    queued: int
    queued_by_priority: dict[str, int]
    queued_ages_s: list[float]
    """Seconds each waiting request has waited, in queue order (highest priority first, oldest
    first within one); the first 1,000 (`queued` counts them all). What a what-if starts from."""
    in_flight_prompt_tokens: int
    unprefilled_prompt_tokens: int
    """Prompt tokens admitted with no first token yet: the prefill backlog this gateway made."""
    prefill_tok_per_s: float | None
    """Prompt tokens the engine prefills per second while it has some to (None: not measured)."""
    binding: str | None
    """The limit holding the head of the queue now (a field of LIMITS, or share_slots /
    share_kv_blocks); None when nobody waits."""
    offered: int
    outcomes: dict[str, int]
    rejections: dict[str, int]
    refusals: dict[str, Any]
    """The 429s given at arrival for their predicted start, against the slots that came:
    the last two minutes' counts, a line saying them, and each of the last ten minutes
    (gateway/admission/refusals.py)."""
    queue_wait_s: QuantilesDoc
    ttft_s: QuantilesDoc
    window_s: float
    paused: bool
    in_flight_kv_blocks: int
    engine_ttft_s: float | None
    """The engine's TTFT the autopilot steers by (None: not read yet)."""
    mode: str
    autopilot: dict[str, Any] | None
    """The autopilot's last state (budget, reason); None in manual mode before it ran."""
    limits: LimitsDoc
    slo: SloDoc
    upstream: UpstreamDoc
    handler_s: QuantilesDoc
    """The gateway's own time per request (handler time), p50 and p95."""
    upstream_errors: dict[str, int]
    """Upstream failures by reason (engine_queue_full: vLLM's own 503; engine_error, ...)."""
    oldest_queued_s: float | None
    """Age of the oldest request waiting in the gateway now (None: none waits)."""
    oldest_unanswered_s: float | None
    """Age since arrival of the oldest request at the engine without a first byte yet."""
    replicas: list[ReplicaDoc]
    shared: SharedDoc
    share_slots: int | None
    """Admission's cap from outside the limits (shared grant, live replicas); None: none."""
    share_kv_blocks: int | None
    history: HistoryDoc
    """The gateway's history (docs/recording.md, "History in the gateway")."""


class HistoryDoc(TypedDict, total=False):
    """/admin/stats' `history`: kept or not, where, how much, since when, and why not."""

    on: bool
    path: str | None
    bytes: int
    """The file's bytes on disk, its write-ahead log included."""
    oldest: float | None
    """Epoch seconds of the oldest poll kept."""
    polls_written: int
    polls_dropped: int
    """Polls dropped because the disk was slower than the polls (the writer's queue was full)."""
    max_age_s: float
    max_bytes: int
    why_off: str | None


class EventDoc(TypedDict):
    """One limit change or pause/resume (field "paused"); time is epoch seconds."""

    time: float
    field: str
    old: Any
    new: Any
    source: str


class EventsDoc(TypedDict):
    """GET /admin/events: the recent changes, oldest first."""

    events: list[EventDoc]


def parse_events(data: object) -> list[EventDoc]:
    """The events of an /admin/events answer; anything that is not an event object is dropped."""
    raw = data.get("events") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        return []
    return [e for e in raw if isinstance(e, dict)]  # type: ignore[misc]


def event_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    """What makes an event itself (a reader dedups the list it polls by this)."""
    return tuple(repr(event.get(k)) for k in ("time", "field", "old", "new", "source"))
