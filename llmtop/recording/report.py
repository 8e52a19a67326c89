"""A postmortem summary of a run: what an on-call engineer pastes into the incident write-up.

Pure: Snapshots (a fresh Pipeline's, so today's rules) and limit changes in, a `Report` out;
`to_markdown`/`to_dict` render it, `recording.charts` draws it. Its contents: docs/recording.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import GatewayStats, Snapshot
from llmtop.core.derive.aggregate import combine
from llmtop.core.output.incidents import gateway_changes, timeline

AROUND_S = 30.0
"""Seconds of TTFT p95 averaged before and after each limit change."""


@dataclass(frozen=True)
class Peak:
    """The highest value of one metric over the run, and when (None: never known)."""

    value: float | None
    time: float | None


@dataclass(frozen=True)
class FindingSpan:
    """One finding from when it fired to when it cleared (None: still firing at the end)."""

    id: str
    severity: str
    bottleneck: str
    summary: str
    action: str
    fired: float
    cleared: float | None


@dataclass(frozen=True)
class LimitChange:
    """One change of a gateway limit, with the TTFT p95 means around it (None: no data)."""

    time: float
    field: str
    old: Any
    new: Any
    source: str
    ttft_p95_before_s: float | None
    ttft_p95_after_s: float | None
    gateway_ttft_p95_before_s: float | None
    gateway_ttft_p95_after_s: float | None
    ttft_under_slo_after_s: float | None = None
    """Seconds from the change until the engine's TTFT p95 is first back under the SLO."""


@dataclass(frozen=True)
class Series:
    """Per-poll headline numbers for the charts (engines: KV and TTFT the worst, waiting summed)."""

    time: tuple[float, ...] = ()
    ttft_p95_s: tuple[float | None, ...] = ()
    gateway_ttft_p95_s: tuple[float | None, ...] = ()
    kv_cache_usage_frac: tuple[float | None, ...] = ()
    waiting: tuple[float | None, ...] = ()
    gateway_queued: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Report:
    """Everything the postmortem needs; `to_dict` is its JSON form."""

    source: str
    start: float | None
    end: float | None
    polls: int
    peaks: dict[str, Peak]
    findings: tuple[FindingSpan, ...]
    limit_changes: tuple[LimitChange, ...]
    series: Series = field(default_factory=Series)
    meta: dict[str, Any] = field(default_factory=dict)
    live_finding_ids: tuple[str, ...] | None = None
    """Findings the live run showed (recorded for reference); None when not known."""

    @property
    def duration_s(self) -> float | None:
        """Seconds from the first poll to the last."""
        return None if self.start is None or self.end is None else self.end - self.start

    def to_dict(self, *, with_series: bool = False) -> dict[str, Any]:
        """JSON-ready; times are epoch seconds (UTC); None stays null."""
        d = asdict(self)
        d["duration_s"] = self.duration_s
        if not with_series:
            d.pop("series")
        return d


PEAKS = {
    "waiting": "Engine waiting (requests)",
    "gateway_queued": "Gateway queued (requests)",
    "kv_cache_usage_frac": "KV-cache usage",
    "ttft_p95_s": "TTFT p95, engine",
    "gateway_ttft_p95_s": "TTFT p95, gateway (queue included)",
}


def _gw(snap: Snapshot) -> GatewayStats | None:
    g = snap.gateway
    return g if g is not None and g.up else None


def series_of(snapshots: Sequence[Snapshot]) -> Series:
    """The chart series of a run, one point per snapshot (engines combined:
    core.derive.aggregate)."""
    engines = [combine([e for e in s.engines if e.up]) for s in snapshots]
    gws = [_gw(s) for s in snapshots]
    return Series(
        time=tuple(s.time for s in snapshots),
        ttft_p95_s=tuple(None if e is None else e.ttft_p95_s for e in engines),
        gateway_ttft_p95_s=tuple(None if g is None else g.ttft_p95_s for g in gws),
        kv_cache_usage_frac=tuple(None if e is None else e.kv_cache_usage_frac for e in engines),
        waiting=tuple(None if e is None else e.waiting for e in engines),
        gateway_queued=tuple(
            None if g is None or g.queued is None else float(g.queued) for g in gws
        ),
    )


def _peak(times: Sequence[float], values: Sequence[float | None]) -> Peak:
    best: Peak = Peak(None, None)
    for t, v in zip(times, values, strict=True):
        if v is not None and (best.value is None or v > best.value):
            best = Peak(v, t)
    return best


def finding_spans(snapshots: Sequence[Snapshot]) -> tuple[FindingSpan, ...]:
    """When each finding fired and cleared (core.output.incidents), in firing order; a refire is
    a new span."""
    open_: dict[str, FindingSpan] = {}
    done: list[FindingSpan] = []
    for i in timeline(snapshots):
        if i.kind == "finding_cleared" and i.subject in open_:
            done.append(replace(open_.pop(i.subject), cleared=i.time))
        elif i.kind == "finding_fired" and i.finding is not None:
            f = i.finding
            fired = f.since if f.since is not None else i.time
            open_[f.id] = FindingSpan(
                f.id, f.severity, f.bottleneck, f.summary, f.action, fired, None
            )
    done.extend(open_.values())
    return tuple(sorted(done, key=lambda s: s.fired))


def _mean(
    times: Sequence[float], values: Sequence[float | None], lo: float, hi: float
) -> float | None:
    """Mean of the known values with lo <= t < hi (a poll at the change's time is after it)."""
    known = [v for t, v in zip(times, values, strict=True) if lo <= t < hi and v is not None]
    return sum(known) / len(known) if known else None


def _observed_changes(snapshots: Sequence[Snapshot]) -> list[tuple[float, float, str, Any, Any]]:
    """(prev time, time, field, old, new) for each limit (or the paused flag) that differs
    between two answers of the gateway (polls where it was down are skipped)."""
    out = []
    prev: tuple[float, GatewayStats] | None = None
    for snap in snapshots:
        g = _gw(snap)
        if g is None:
            continue
        if prev is not None:
            out += [
                (prev[0], i.time, i.subject, i.old, i.new)
                for i in gateway_changes(prev[1], g, snap.time)
            ]
        prev = (snap.time, g)
    return out


def _under_slo_after(series: Series, t: float, slo_s: float | None) -> float | None:
    """Seconds from `t` to the first known engine TTFT p95 at or under the SLO (from t on)."""
    if slo_s is None:
        return None
    for when, v in zip(series.time, series.ttft_p95_s, strict=True):
        if when >= t and v is not None and v <= slo_s:
            return when - t
    return None


def limit_changes(
    snapshots: Sequence[Snapshot],
    events: Sequence[Mapping[str, Any]],
    series: Series,
    ttft_slo_s: float | None = None,
) -> tuple[LimitChange, ...]:
    """Every limit change (events first, then changes only seen in the polls), with TTFT around."""
    found: list[tuple[float, str, Any, Any, str]] = []
    seen: set[tuple[float, str, str]] = set()
    for e in events:
        t, name = e.get("time"), e.get("field")
        if not isinstance(t, int | float) or not isinstance(name, str):
            continue
        key = (float(t), name, repr(e.get("new")))
        if key not in seen:
            seen.add(key)
            who = str(e.get("source") or "unknown")  # Prometheus holds no who
            found.append((float(t), name, e.get("old"), e.get("new"), who))
    for lo, hi, name, old, new in _observed_changes(snapshots):
        explained = any(lo <= t <= hi and n == name and nv == new for t, n, _, nv, _ in found)
        if not explained:
            found.append((hi, name, old, new, "observed"))
    out = []
    for t, name, old, new, source in sorted(found, key=lambda c: c[0]):
        out.append(
            LimitChange(
                time=t,
                field=name,
                old=old,
                new=new,
                source=source,
                ttft_p95_before_s=_mean(series.time, series.ttft_p95_s, t - AROUND_S, t),
                ttft_p95_after_s=_mean(series.time, series.ttft_p95_s, t, t + AROUND_S),
                gateway_ttft_p95_before_s=_mean(
                    series.time, series.gateway_ttft_p95_s, t - AROUND_S, t
                ),
                gateway_ttft_p95_after_s=_mean(
                    series.time, series.gateway_ttft_p95_s, t, t + AROUND_S
                ),
                ttft_under_slo_after_s=_under_slo_after(series, t, ttft_slo_s),
            )
        )
    return tuple(out)


def build(
    snapshots: Sequence[Snapshot],
    events: Sequence[Mapping[str, Any]] = (),
    *,
    source: str = "",
    meta: Mapping[str, Any] | None = None,
    ttft_slo_s: float | None = None,
    live_findings: Sequence[Sequence[Mapping[str, Any]]] | None = None,
) -> Report:
    """The report of a run: `snapshots` in time order, `events` the gateway's limit changes.

    With `ttft_slo_s`, each change says when TTFT p95 got back under it; with `live_findings` (per
    poll, as recorded), where today's rules disagree with what the live screen showed.
    """
    live = None
    if live_findings is not None:
        live = tuple(sorted({str(f.get("id")) for poll in live_findings for f in poll}))
    series = series_of(snapshots)
    peaks = {name: _peak(series.time, getattr(series, name)) for name in PEAKS}
    return Report(
        source=source,
        start=series.time[0] if series.time else None,
        end=series.time[-1] if series.time else None,
        polls=len(snapshots),
        peaks=peaks,
        findings=finding_spans(snapshots),
        limit_changes=limit_changes(snapshots, events, series, ttft_slo_s),
        series=series,
        meta=dict(meta or {}),
        live_finding_ids=live,
    )


# ---- markdown ---------------------------------------------------------------------------------


def offset(t: float | None, start: float | None) -> str:
    """'+3m05s' from the start of the run."""
    if t is None or start is None:
        return fmt.NA
    m, s = divmod(round(t - start), 60)
    return f"+{m}m{s:02d}s"


def _value(name: str, v: float | None) -> str:
    if name == "kv_cache_usage_frac":
        return fmt.frac(v)
    if name.endswith("_s"):
        return fmt.seconds(v)
    return fmt.count(v)


def _limit(v: Any) -> str:
    return "off" if v is None else str(v)


CHARTS = (
    ("ttft_p95.png", "TTFT p95"),
    ("kv_usage.png", "KV-cache usage"),
    ("queues.png", "Engine waiting vs gateway queued"),
)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "/")


def _live_vs_now(r: Report) -> list[str]:
    """Where the current rules disagree with what the live screen showed (if recorded)."""
    if r.live_finding_ids is None:
        return []
    live, now = set(r.live_finding_ids), {f.id for f in r.findings}
    if live == now:
        return ["", "The live run showed the same findings."]
    out = [""]
    if live - now:
        out.append(f"- Shown live, not fired by the current rules: {', '.join(sorted(live - now))}")
    if now - live:
        out.append(f"- Fired by the current rules, not shown live: {', '.join(sorted(now - live))}")
    return out


def _recovered(c: LimitChange) -> str:
    if c.ttft_under_slo_after_s is None:
        return "not within the recording"
    return f"{fmt.seconds(c.ttft_under_slo_after_s)} after"


def to_markdown(r: Report, *, charts: bool = False) -> str:
    """The report as Markdown; with `charts`, links to the PNGs written beside it."""
    t0 = r.start
    lines = [f"# llmtop report: {r.source}" if r.source else "# llmtop report", ""]
    version = r.meta.get("version")
    lines += [
        f"- Start: {fmt.utc_time(r.start)}",
        f"- End: {fmt.utc_time(r.end)} ({fmt.seconds(r.duration_s)}, {r.polls} polls)",
    ]
    if r.meta.get("targets"):
        targets = r.meta["targets"]
        shown = ", ".join(
            f"{k} {', '.join(v) if isinstance(v, list) else v}" for k, v in targets.items() if v
        )
        lines.append(f"- Targets: {shown}")
    if version:
        lines.append(f"- Recorded by llmtop {version}; findings recomputed with the current rules")
    lines += ["", "## Peaks", "", "| metric | peak | at |", "|---|---|---|"]
    for name, title in PEAKS.items():
        p = r.peaks[name]
        at = fmt.NA if p.time is None else f"{fmt.utc_time(p.time)[11:19]} ({offset(p.time, t0)})"
        lines.append(f"| {title} | {_value(name, p.value)} | {at} |")
    lines += ["", "## Findings", ""]
    if not r.findings:
        lines.append("No finding fired.")
    else:
        lines += [
            "| finding | severity | fired | cleared | lasted | what it said |",
            "|---|---|---|---|---|---|",
        ]
        for f in r.findings:
            end = f.cleared if f.cleared is not None else r.end
            cleared = "still firing at the end" if f.cleared is None else offset(f.cleared, t0)
            lasted = fmt.seconds(None if end is None else end - f.fired)
            lines.append(
                f"| {f.id} | {f.severity} | {offset(f.fired, t0)} | {cleared} | {lasted} |"
                f" {_cell(f.summary)} |"
            )
    lines += _live_vs_now(r)
    lines += ["", f"## Limit changes (TTFT p95 mean over {AROUND_S:g} s before / after)", ""]
    if not r.limit_changes:
        lines.append("No limit changed.")
    else:
        lines += [
            "| at | change | by | engine TTFT p95 before → after"
            " | gateway TTFT p95 before → after | engine TTFT p95 under SLO |",
            "|---|---|---|---|---|---|",
        ]
        for c in r.limit_changes:
            lines.append(
                f"| {offset(c.time, t0)} | {c.field} {_limit(c.old)} → {_limit(c.new)} |"
                f" {c.source} | {fmt.seconds(c.ttft_p95_before_s)} →"
                f" {fmt.seconds(c.ttft_p95_after_s)} | {fmt.seconds(c.gateway_ttft_p95_before_s)}"
                f" → {fmt.seconds(c.gateway_ttft_p95_after_s)} | {_recovered(c)} |"
            )
    if charts:
        lines += ["", "## Charts", ""]
        lines += [f"![{title}]({name})" for name, title in CHARTS]
    return "\n".join(lines) + "\n"
