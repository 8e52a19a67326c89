"""One tick of the autopilot against the admission controller: in mode auto it applies the budgets
it computes; in mode advise it only says what it would set and why (/admin/stats'
`autopilot.suggestion`, the gateway panel) and POST /admin/autopilot/apply (the TUI's `A`) sets it.
Pure: server/autopilot_loop.py and bench/bench_autopilot.py call `drive` with each scrape's signals
and the controller's clock."""

from __future__ import annotations

import math
from typing import Any

from llmtop.core.derive.signals import EngineSignals
from llmtop.gateway.admission.controller import AUTOPILOT, AdmissionController, Limits
from llmtop.gateway.autopilot.autopilot import Autopilot
from llmtop.gateway.autopilot.engines import by_slots, reads, title, without_preemptions
from llmtop.gateway.autopilot.status import blocks_text

AUTO_MAX_CONCURRENCY = 1024
"""In auto mode max_concurrency is only a ceiling: the KV budget does the admitting."""
MODES_DRIVEN = ("auto", "advise")


def drive(
    ctl: AdmissionController,
    pilot: Autopilot,
    sig: EngineSignals | None,
    now: float,
    *,
    unread: str = "no replica",
    engine: str | None = None,
    slots_told: int | None = None,
) -> None:
    """One tick: learn the footprint, step the controller, and in auto mode apply its moves
    (in advise mode keep them as a suggestion). `sig` None: no replica's /metrics could be
    read (`unread` says why); the KV budget holds (the prefill budget is the gateway's own
    count and keeps moving). `engine`: the dialect the scrape was read in (sglang,
    llamacpp), named in the reasons; an engine with no KV capacity is capped by its slots
    (`slots_told`: those its info endpoint says, every replica added), one that counts no
    preemptions is stepped without them (engines.py)."""
    if engine is not None:
        pilot.engine = engine
    if slots_told is not None:
        pilot.slots.told = slots_told
    lim = ctl.limits
    if lim.mode not in MODES_DRIVEN:
        pilot.reset(None)
        pilot.prefill_applied = None
        pilot.advisory = False
        pilot.last_reason = "manual: the autopilot is off"
        ctl.autopilot = pilot.status(ctl)
        return
    advise = lim.mode == "advise"
    if advise != pilot.advisory:  # a new mode: its own budgets from the start
        pilot.reset(None)
        pilot.prefill_applied = None
        pilot.advisory = advise
    pre = pilot.prefill_budget(ctl.prefill_tok_per_s(), ctl.unprefilled_tokens)
    if not advise and pre is not None and pre != lim.max_unprefilled_prompt_tokens:
        ctl.set_limits(
            {"max_unprefilled_prompt_tokens": pre},
            source=AUTOPILOT,
            reason=f"prefill budget {blocks_text(pre)} tokens: {pilot.prefill_reason}",
        )
    if sig is None:
        pilot.last_reason = f"upstream /metrics unreadable ({unread}): holding"
        _publish(ctl, pilot)
        return
    if by_slots(pilot.engine, sig):  # llama.cpp, TGI, LMDeploy, Dynamo's frontend
        pilot.reads = reads(pilot.engine, by_slots=True)
        _by_slots(ctl, pilot, sig, advise)
        return
    pilot.reads = reads(pilot.engine, by_slots=False)
    sig = without_preemptions(pilot.engine, sig)
    if ctl.footprint is not None:
        ctl.footprint.learn(sig.prompt_tokens, sig.output_tokens_hist, sig.kv_block_size)
    lim = ctl.limits
    if not advise:
        if pilot.applied != lim.max_inflight_kv_blocks:
            pilot.reset(lim.max_inflight_kv_blocks)  # someone else set it while auto
        if lim.max_concurrency < AUTO_MAX_CONCURRENCY:
            ctl.set_limits(
                {"max_concurrency": AUTO_MAX_CONCURRENCY},
                source=AUTOPILOT,
                reason="autopilot on: admits by KV footprint; max_concurrency is only a ceiling",
            )
    finished = ctl.drain_rate()
    room = room_blocks(ctl, pilot, sig)
    move = pilot.step(
        now,
        sig,
        in_flight_blocks=ctl.in_flight_kv_blocks,
        queued=ctl.queued,
        in_flight=ctl.in_flight,
        turned_over=bool(finished),
        finished_per_s=finished,
        finished_total=ctl.estimates.finished_total,
        served_total=ctl.estimates.served_total,
        peak_share=ctl.peak_share(sig.kv_block_size or 16, sig.itl_mean_s),
        room_blocks=room,
    )
    if move is not None and not advise:
        ctl.set_limits({"max_inflight_kv_blocks": move.new}, source=AUTOPILOT, reason=move.reason)
    claimed = room is not None and room >= (pilot.applied or 0)  # the budget went there
    ctl.set_engine_room(0 if advise or claimed else engine_room_tokens(ctl, pilot, sig))
    _publish(ctl, pilot)


def _by_slots(ctl: AdmissionController, pilot: Autopilot, sig: EngineSignals, advise: bool) -> None:
    """An engine with no KV figure: the cap by its slots and the TTFT measured here
    (`slots.Slots`); the KV budget is not used."""
    c = pilot.config
    budget = c.engine_ttft_share * c.ttft_slo_s
    cap = pilot.slots.step(sig, ctl.engine_ttft_s, budget, title(pilot.engine), ctl.queued)
    pilot.last_reason = pilot.slots.reason
    lim = ctl.limits
    if not advise and cap is not None and cap != lim.max_concurrency:
        changes: dict[str, int | None] = {"max_concurrency": cap}
        if lim.max_inflight_kv_blocks is not None:
            changes["max_inflight_kv_blocks"] = None
        ctl.set_limits(changes, source=AUTOPILOT, reason=pilot.slots.reason)
    _publish(ctl, pilot)


def room_blocks(ctl: AdmissionController, pilot: Autopilot, sig: EngineSignals) -> float | None:
    """The KV budget the engine's own room allows now: the footprint in flight plus as many more
    requests like the largest in flight as can start (lifetimes.newcomers_fit: the predicted peak
    within `room_use` of the cache, `room_spare_requests` more on a cache under `room_spare_below`
    of the mix, anchored to the KV held plus prompts not yet prefilled; each prompt within the free
    cache, as vLLM starts one). None: a figure unknown, or the engine queues or preempts."""
    cache, c, n = calm_cache(sig), pilot.config, ctl.in_flight
    if cache is None or c.room_use <= 0 or not n:
        return None
    cap, kv, size = cache
    per = ctl.in_flight_kv_blocks / n
    held = kv * cap + ctl.unprefilled_tokens / size
    itl = sig.itl_mean_s
    per_token = (
        itl * c.room_itl_factor if itl is not None and itl > 0 and c.room_itl_factor > 0 else None
    )
    limit, free = c.room_use * cap, c.room_use * cap - held
    coarse = cap < c.room_spare_below * per and not ctl.queued  # nobody waits: one more
    spare = c.room_spare_requests * per if coarse else 0.0
    more = ctl.newcomers_fit(size, limit + spare, held, per_token, free_blocks=free)
    largest = ctl.largest_in_flight_kv_blocks()
    return None if more is None else ctl.in_flight_kv_blocks + more * largest


def engine_room_tokens(ctl: AdmissionController, pilot: Autopilot, sig: EngineSignals) -> int:
    """Prompt tokens the engine would start at once: the blocks it reports free less the
    prompts admitted and not yet prefilled; 0 while it queues inside, a figure is unknown, or
    the autopilot sees trouble (a thrash, a slow ITL, a TTFT over its share of the SLO). `drive`
    gives it only where the engine's room (room_blocks) does not already carry the budget."""
    cache = calm_cache(sig)
    if cache is None or not pilot.calm(sig):
        return 0
    cap, kv, size = cache
    return int(cap * (1.0 - kv) * size) - ctl.unprefilled_tokens


def calm_cache(sig: EngineSignals) -> tuple[int, float, int] | None:
    """The cache (blocks, KV use 0..1, block size) when every figure is known and the engine
    neither queues nor preempts inside; None otherwise: no room to claim."""
    cap, kv, size = sig.kv_capacity_blocks, sig.kv_usage_frac, sig.kv_block_size
    if cap is None or kv is None or not math.isfinite(kv) or not size:
        return None
    return None if sig.waiting != 0 or sig.preemptions != 0 else (cap, kv, size)


def _publish(ctl: AdmissionController, pilot: Autopilot) -> None:
    """The autopilot's part of /admin/stats; in advise mode with its suggestion."""
    doc = pilot.status(ctl)
    if pilot.advisory:
        doc.update(suggestion(pilot, ctl.limits))
    ctl.autopilot = doc


def suggestion(pilot: Autopilot, lim: Limits) -> dict[str, Any]:
    """What the autopilot would set that differs from the limits in force, and why:
    `suggestion` (the fields, as PATCH /admin/limits takes them; empty when nothing
    differs), `suggestion_reason`, and `reason` in words ("would set KV budget 3,100 blocks
    (now none), ...: headroom ...")."""
    want: dict[str, int] = {}
    if pilot.applied is not None:
        want["max_inflight_kv_blocks"] = pilot.applied
    if pilot.prefill_applied is not None:
        want["max_unprefilled_prompt_tokens"] = pilot.prefill_applied
    if pilot.slots.cap is not None:
        want["max_concurrency"] = pilot.slots.cap  # no KV figure: the cap admits
    elif want and lim.max_concurrency < AUTO_MAX_CONCURRENCY:
        want["max_concurrency"] = AUTO_MAX_CONCURRENCY  # the budgets admit; a cap only
    changes = {k: v for k, v in want.items() if getattr(lim, k) != v}
    why = pilot.last_reason.split(": ", 1)[-1]
    words = {
        "max_inflight_kv_blocks": "KV budget",
        "max_unprefilled_prompt_tokens": "prefill budget",
        "max_concurrency": "cap",
    }
    if not changes:
        text = "the limits in force are what the autopilot would set" if want else pilot.last_reason
    else:
        parts = [
            f"{words[k]} {blocks_text(v)} (now {_now(getattr(lim, k))})" for k, v in changes.items()
        ]
        text = f"would set {', '.join(parts)}: {why}"
    return {
        "suggestion": changes,
        "suggestion_reason": f"{why}; prefill: {pilot.prefill_reason}",
        "reason": text,
    }


def _now(value: int | None) -> str:
    return "none" if value is None else blocks_text(value)


__all__ = ["AUTO_MAX_CONCURRENCY", "MODES_DRIVEN", "drive", "room_blocks", "suggestion"]
