"""The autopilot's part of /admin/stats: the engine read and how (its KV figure or its slots),
every budget in force, which one binds the queue's head now and why, in words with the
arithmetic ("prefill backlog 9,100 tokens, budget 2,400: holding new prompts")."""

from __future__ import annotations

from typing import Any, Protocol

from llmtop.gateway.admission.limits import Limits


class Pilot(Protocol):
    """What the status reads of the autopilot (gateway/autopilot/autopilot.py's Autopilot)."""

    applied: int | None
    capacity: int | None
    prefill_applied: int | None
    prefill_reason: str
    last_reason: str
    unread: tuple[str, ...]
    engine: str | None
    reads: str


class Admission(Protocol):
    """...and of admission (gateway/admission/controller.py's AdmissionController)."""

    @property
    def limits(self) -> Limits: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def in_flight_kv_blocks(self) -> int: ...
    @property
    def unprefilled_tokens(self) -> int: ...

    engine_room_tokens: int
    over_budget_admitted: int

    def binding(self) -> str | None: ...
    def prefill_tok_per_s(self) -> float | None: ...
    def good_per_s(self) -> float: ...


def blocks_text(n: float) -> str:
    """A count of blocks or tokens as people read it (2,425)."""
    return f"{n:,.0f}"


def autopilot_status(pilot: Pilot, ctl: Admission) -> dict[str, Any]:
    """The budgets, the binding one and the reasons; the KV budget also as requests of the
    recent mix."""
    per = ctl.in_flight_kv_blocks / ctl.in_flight if ctl.in_flight else None
    binding = ctl.binding()
    unread = pilot.unread
    return {
        "engine": pilot.engine,
        "reads": pilot.reads,
        "budget_blocks": pilot.applied,
        "capacity_blocks": pilot.capacity,
        "budget_requests": round(pilot.applied / per) if per and pilot.applied else None,
        "prefill_budget_tokens": pilot.prefill_applied,
        "prefill_tok_per_s": ctl.prefill_tok_per_s(),
        "served_within_slo_per_s": ctl.good_per_s(),
        "engine_room_tokens": ctl.engine_room_tokens,
        "over_budget_admitted": ctl.over_budget_admitted,
        "binding": binding,
        "binding_reason": binding_reason(ctl, binding),
        "prefill_reason": pilot.prefill_reason,
        "reason": pilot.last_reason
        + (f" ({len(unread)} replica(s) unread: {', '.join(unread)})" if unread else ""),
    }


def binding_reason(ctl: Admission, binding: str | None) -> str | None:
    """What holds the queue's head, in words with the arithmetic."""
    lim = ctl.limits
    if binding == "max_unprefilled_prompt_tokens":
        return (
            f"prefill backlog {blocks_text(ctl.unprefilled_tokens)} tokens, budget"
            f" {blocks_text(lim.max_unprefilled_prompt_tokens or 0)}: holding new prompts"
        )
    if binding == "max_inflight_kv_blocks":
        return (
            f"KV footprint in flight {blocks_text(ctl.in_flight_kv_blocks)} blocks, budget"
            f" {blocks_text(lim.max_inflight_kv_blocks or 0)}: holding until some finish"
        )
    if binding == "max_concurrency":
        return f"{ctl.in_flight} in flight, max_concurrency {lim.max_concurrency}"
    if binding is not None:
        return f"held by {binding}"
    return None
