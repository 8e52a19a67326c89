"""The severity policy: a finding's severity follows what users get. Pure. Critical or warning
need the SLO missed now or about to be (a TTFT or ITL p95 trend crossing it within
`trend_horizon_s`, stated); inside it, a full cache, a queue or a slowdown is info, worded with
its headroom. Latency unknown while the rule holds is a warning that says so, never "inside".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Severity
from llmtop.core.health.rulebase import Context


@dataclass(frozen=True)
class SloReading:
    """Where an engine stands against the SLO: missed, about to miss, inside, or unknown."""

    state: str
    """"missed", "trend", "inside" or "unknown"."""
    words: str
    """The evidence: "TTFT p95 80 ms, ITL p95 38 ms: inside the SLO (2 s / 100 ms), ..."."""

    def severity(self, when_missed: Severity = "critical") -> Severity:
        """The finding's severity: `when_missed` when the SLO is missed, warning when about to
        be or unknown, info inside it."""
        if self.state == "missed":
            return when_missed
        return "info" if self.state == "inside" else "warning"


def _past_p95(
    ctx: Context, url: str, ago: float
) -> tuple[float, float | None, float | None] | None:
    """(seconds ago, TTFT p95, ITL p95) of the engine about `ago` s ago (at least half)."""
    best: tuple[float, float | None, float | None] | None = None
    for snap in reversed(ctx.history):
        dt = ctx.time - snap.time
        if dt < ago / 2:
            continue
        if dt > ago * 2:
            break
        for e in snap.engines:
            known = e.ttft_p95_s is not None or e.itl_p95_s is not None
            if (
                e.url == url
                and e.up
                and known
                and (best is None or abs(dt - ago) < abs(best[0] - ago))
            ):
                best = (dt, e.ttft_p95_s, e.itl_p95_s)
    return best


def _eta_s(
    now: float,
    then: float | None,
    older: float | None,
    dt: float,
    slo: float,
    lately: tuple[float, float | None] | None,
) -> float | None:
    """Seconds until a p95 reaches its SLO at its rise over the last window (`dt` s), when that
    is a trend: it rose over each of the last two windows (by 5 % at least, the later rise at most
    three times the earlier; a step shows in one window only), and still rises over the last
    polls (`lately`: seconds ago and the p95 then) at half its window pace at least (a level has
    stopped)."""
    if then is None or older is None or dt <= 0 or lately is None or lately[1] is None:
        return None
    early, late = then - older, now - then
    if not early > 0.05 * older or not late > 0.05 * then or not late <= 3.0 * early:
        return None
    if (now - lately[1]) / lately[0] < 0.5 * late / dt:
        return None
    return (slo - now) / (late / dt)


def _queue_drain(e: EngineStats, ttft_slo_s: float) -> str | None:
    """Why the requests waiting now will miss the TTFT SLO (None: they need not). The TTFT
    histogram holds only requests that have their first token, so a queue shows there late:
    at the rate requests finish, the newest of N waiting gets a slot in N / rate seconds."""
    waiting = e.waiting_capacity if e.waiting_capacity is not None else e.waiting
    if not waiting or waiting < 1:
        return None
    done = sum(e.finished_per_s.values())
    if not done:
        return f"{fmt.count(waiting)} waiting and none finished over the window"
    drain_s = waiting / done
    if drain_s <= ttft_slo_s:
        return None
    return (
        f"{fmt.count(waiting)} waiting at {fmt.per_s(done)} finished: a new request waits "
        f"~{fmt.seconds(drain_s)} for a slot, over the {fmt.seconds(ttft_slo_s)} TTFT SLO"
    )


def read_slo(ctx: Context, e: EngineStats) -> SloReading:
    """The engine's latency against the SLO, with its trend over the window."""
    slo = ctx.settings.slo
    ttft, itl = e.ttft_p95_s, e.itl_p95_s
    target = f"({fmt.seconds(slo.ttft_s)} / {fmt.seconds(slo.itl_s)})"
    if ttft is None and itl is None:
        return SloReading("unknown", f"TTFT and ITL unknown over the window (SLO {target[1:]}")
    parts = []
    if ttft is not None:
        parts.append(f"TTFT p95 {fmt.seconds(ttft)}")
    if itl is not None:
        parts.append(f"ITL p95 {fmt.seconds(itl)}")
    now = ", ".join(parts)
    if (ttft is not None and ttft > slo.ttft_s) or (itl is not None and itl > slo.itl_s):
        return SloReading("missed", f"{now}: over the SLO {target}")
    g = ctx.gateway  # the gateway sees a stuck request at once, the histograms once answered
    stuck = g.oldest_unanswered_s if g is not None and g.up else None
    if stuck is not None and stuck > slo.ttft_s:
        return SloReading(
            "missed",
            f"{now}, but a request at the engine has waited {fmt.seconds(stuck)} for its first "
            f"token: over the SLO {target}",
        )
    drain = _queue_drain(e, slo.ttft_s)
    if drain is not None:
        return SloReading("trend", f"{now}, but {drain}")
    w = ctx.settings.window_s
    past, older = _past_p95(ctx, e.url, w), _past_p95(ctx, e.url, 2 * w)
    recent = _past_p95(ctx, e.url, w / 5)
    if past is not None and older is not None and recent is not None and older[0] > past[0]:
        dt, ttft_then, itl_then = past
        for name, value, then, before, bound, lately in (
            ("TTFT", ttft, ttft_then, older[1], slo.ttft_s, recent[1]),
            ("ITL", itl, itl_then, older[2], slo.itl_s, recent[2]),
        ):
            if value is None:
                continue
            eta = _eta_s(value, then, before, dt, bound, (recent[0], lately))
            if eta is not None and eta <= ctx.settings.trend_horizon_s:
                return SloReading(
                    "trend",
                    f"{name} p95 {fmt.seconds(then)} -> {fmt.seconds(value)} in {dt:.0f} s: "
                    f"over its {fmt.seconds(bound)} SLO in ~{max(eta, 0.0):.0f} s at this rate",
                )
    room = []
    if ttft is not None and ttft > 0:
        room.append(f"{slo.ttft_s / ttft:.1f}x")
    if itl is not None and itl > 0:
        room.append(f"{slo.itl_s / itl:.1f}x")
    headroom = f", headroom {' / '.join(room)}" if room else ""
    return SloReading("inside", f"{now}: inside the SLO {target}{headroom}")


def worst_reading(ctx: Context, engines: Iterable[EngineStats]) -> SloReading:
    """The reading of the engine furthest from its SLO (for a finding about shared GPUs)."""
    order = {"missed": 0, "trend": 1, "unknown": 2, "inside": 3}
    readings = [read_slo(ctx, e) for e in engines if e.up and not e.stats_disabled]
    if not readings:
        return SloReading("unknown", "no engine's latency is known")
    return min(readings, key=lambda r: order[r.state])


def heads_up(reading: SloReading, text: str) -> str:
    """A finding's summary with its SLO words: "heads-up" first when inside the SLO."""
    if reading.state == "inside":
        return f"heads-up: {text}; {reading.words}"
    return f"{text}; {reading.words}"


def itl_reading(ctx: Context, itl_s: float | None, whose: str) -> SloReading:
    """A time between tokens the gateway measured itself (one replica's streams) against the
    ITL SLO: missed over it, inside under it, unknown without one."""
    slo = ctx.settings.slo.itl_s
    if itl_s is None:
        return SloReading("unknown", f"{whose} ITL unknown (SLO {fmt.seconds(slo)})")
    words = f"{whose} ~{fmt.seconds(itl_s)} a token"
    if itl_s > slo:
        return SloReading("missed", f"{words}: over the ITL SLO ({fmt.seconds(slo)})")
    room = f", headroom {slo / itl_s:.1f}x" if itl_s > 0 else ""
    return SloReading("inside", f"{words}: inside the ITL SLO ({fmt.seconds(slo)}){room}")


def gateway_reading(ctx: Context) -> SloReading:
    """The watched gateway's own TTFT p95 (what its clients got) against the TTFT SLO, for a
    finding about the gateways themselves, which no engine's figures judge."""
    g, slo = ctx.gateway, ctx.settings.slo.ttft_s
    ttft = g.ttft_p95_s if g is not None and g.up else None
    if ttft is None:
        return SloReading("unknown", f"the gateway's TTFT p95 unknown (SLO {fmt.seconds(slo)})")
    words = f"the gateway's TTFT p95 {fmt.seconds(ttft)}"
    if ttft > slo:
        return SloReading("missed", f"{words}: over the SLO ({fmt.seconds(slo)})")
    return SloReading("inside", f"{words}: inside the SLO ({fmt.seconds(slo)})")
