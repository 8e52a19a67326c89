"""`llmtop snapshot`'s verdict over a window of polls. Pure: the polls come in, time with them.
They go through a fresh `Pipeline` (the TUI's), its window spanning them, without hysteresis:
the last poll's verdict and figures cover the window; a finding that held only earlier is kept
apart with its polls and figures, so a figure and a finding never mix polls without saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Finding, Snapshot
from llmtop.core.base.window import KvPeak, WindowFinding, WindowSnapshot
from llmtop.core.findings.catalog import LEVEL_FINDINGS
from llmtop.core.health.thresholds import HealthSettings
from llmtop.core.pipeline.pipeline import HISTORY_S, Pipeline

MAX_WINDOW_S = HISTORY_S / 2
"""Longest window: the pipeline keeps 10 minutes, and half of it leaves room for a slow poll."""

_EPSILON_S = 1e-6
"""Added to the span so float rounding never leaves the first poll out of the window."""


def window_settings(health: HealthSettings, span_s: float) -> HealthSettings:
    """The rules' settings for a window of `span_s`: no hysteresis, the window is the span."""
    return replace(health, fire_after_s=0.0, clear_after_s=0.0, window_s=span_s + _EPSILON_S)


def judge_window(
    raws: Sequence[RawPoll],
    health: HealthSettings,
    interval_s: float,
    *,
    pipeline_class: Callable[[HealthSettings], Pipeline] = Pipeline,
) -> WindowSnapshot:
    """The polls of one window, oldest first, as the snapshot's verdict. Several replicas go
    through `fleet.FleetPipeline` (`pipeline_class`): the verdict then holds the fleet's findings
    and each replica's, its status and exit code follow them, its last Snapshot has the fleet."""
    if not raws:
        raise ValueError("a snapshot needs at least one poll")
    span = raws[-1].time - raws[0].time
    pipeline = pipeline_class(window_settings(health, span))
    tui = pipeline_class(health)  # the findings that compare levels, as the TUI names them
    return fold([with_levels(pipeline.update(r), tui.update(r)) for r in raws], interval_s)


def with_levels(snap: Snapshot, tui: Snapshot) -> Snapshot:
    """A window's snapshot with the findings that compare a figure with its earlier level
    taken from the TUI's pipeline over the same polls: over the window's span the figure now
    and the rows before it would cover different spans, and the rows older than the whole
    window that the span's rules compare with are never there."""
    kept = tuple(f for f in snap.findings if f.id not in LEVEL_FINDINGS)
    levels = tuple(f for f in tui.findings if f.id in LEVEL_FINDINGS)
    if not levels and len(kept) == len(snap.findings):
        return snap
    status, said = snap.status, {f.severity for f in levels}
    if status != "unknown" and "critical" in said:
        status = "critical"
    elif status == "ok" and "warning" in said:
        status = "degraded"
    return replace(snap, findings=kept + levels, status=status)


def fold(snaps: Sequence[Snapshot], interval_s: float) -> WindowSnapshot:
    """Snapshots of one window (its rules' window spanning them all) -> the verdict."""
    start, last = snaps[0].time, snaps[-1]
    seen: dict[str, WindowFinding] = {}
    for snap in snaps:
        for f in snap.findings:
            before = seen.get(f.id)
            seen[f.id] = WindowFinding(
                finding=f,
                first_s=snap.time - start if before is None else before.first_s,
                last_s=snap.time - start,
                held_polls=1 if before is None else before.held_polls + 1,
            )
    now = tuple(seen[f.id] for f in last.findings)
    current = {f.id for f in last.findings}
    earlier = sorted(
        (w for fid, w in seen.items() if fid not in current),
        key=lambda w: (_rank(w.finding), w.first_s),
    )
    return WindowSnapshot(
        last=last,
        start=start,
        polls=len(snaps),
        interval_s=interval_s,
        findings=now,
        earlier=tuple(earlier),
        kv_peaks=_kv_peaks(snaps),
    )


def _rank(f: Finding) -> int:
    return 0 if f.severity == "critical" else 1


def _kv_peaks(snaps: Sequence[Snapshot]) -> dict[str, KvPeak]:
    """Each engine's highest KV usage over the polls (the latest poll on a tie).

    The same polls `rulebase.kv_peak` reads at the last one: the window spans them all.
    """
    peaks: dict[str, KvPeak] = {}
    start = snaps[0].time
    for snap in snaps:
        for e in snap.engines:
            if not e.up or e.kv_cache_usage_frac is None:
                continue
            best = peaks.get(e.url)
            if best is None or e.kv_cache_usage_frac >= best.frac:
                peaks[e.url] = KvPeak(e.kv_cache_usage_frac, snap.time - start)
    return peaks
