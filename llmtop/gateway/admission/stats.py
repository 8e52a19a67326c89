"""The /admin/stats object of one admission controller: what it holds, what it predicts from,
what it counted. Apart from admission.py so the controller keeps to its decisions."""

from __future__ import annotations

from typing import Any, Protocol

from llmtop.gateway.admission.limits import Limits
from llmtop.gateway.admission.refusals import RefusalLedger
from llmtop.gateway.admission.window import SampleWindow


class Stated(Protocol):
    """What the stats read of the controller (state.py's AdmissionState)."""

    queue_wait: SampleWindow
    ttft: SampleWindow
    offered: int
    outcomes: dict[str, int]
    rejections: dict[str, int]
    window_s: int
    paused: bool
    autopilot: dict[str, Any] | None
    refusals: RefusalLedger

    def now(self) -> float: ...
    def wall(self) -> float: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def in_flight_prompt_tokens(self) -> int: ...
    @property
    def in_flight_kv_blocks(self) -> int: ...
    @property
    def unprefilled_tokens(self) -> int: ...
    @property
    def share_slots(self) -> int | None: ...
    @property
    def share_kv_blocks(self) -> int | None: ...
    @property
    def engine_ttft_s(self) -> float: ...
    def queued_by_priority(self) -> dict[str, int]: ...
    def queued_ages_s(self, now: float) -> list[float]: ...
    def prefill_tok_per_s(self) -> float | None: ...
    def binding(self) -> str | None: ...


def stats_doc(ctl: Stated) -> dict[str, Any]:
    """The /admin/stats object, less the upstream (the app knows that)."""
    now = ctl.now()
    w50, w95 = ctl.queue_wait.quantiles(now, (0.5, 0.95))
    t50, t95 = ctl.ttft.quantiles(now, (0.5, 0.95))
    return {
        "time": ctl.wall(),
        "in_flight": ctl.in_flight,
        "queued": ctl.queued,
        "queued_by_priority": ctl.queued_by_priority(),
        "queued_ages_s": ctl.queued_ages_s(now),
        "in_flight_prompt_tokens": ctl.in_flight_prompt_tokens,
        "unprefilled_prompt_tokens": ctl.unprefilled_tokens,
        "prefill_tok_per_s": ctl.prefill_tok_per_s(),
        "binding": ctl.binding(),
        "offered": ctl.offered,
        "outcomes": dict(ctl.outcomes),
        "rejections": dict(ctl.rejections),
        "refusals": ctl.refusals.doc(now),
        "queue_wait_s": {"p50": w50, "p95": w95},
        "ttft_s": {"p50": t50, "p95": t95},
        "window_s": ctl.window_s,
        "paused": ctl.paused,
        "in_flight_kv_blocks": ctl.in_flight_kv_blocks,
        "share_slots": ctl.share_slots,
        "share_kv_blocks": ctl.share_kv_blocks,
        "engine_ttft_s": ctl.engine_ttft_s,
        "mode": ctl.limits.mode,
        "autopilot": ctl.autopilot,
        "limits": ctl.limits.to_dict(),
    }
