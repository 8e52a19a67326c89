"""What the console says of its past (pure): the event log's lines for what fired and changed
before it opened, each marked, and the header's words for where the past comes from.

The marker goes before a line's detail (`critical kv-exhausted (before you connected): ...`), so
an 80-column log that cuts the detail keeps it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmtop.core.base.admin_api import LIMIT_FIELDS, PAUSED
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.span import span_text
from llmtop.tui.view.commands import label_of
from llmtop.tui.view.present import LogEvent, diff_events, limit_text

BEFORE = "(before you connected)"


def marked(event: LogEvent, times: int = 1) -> LogEvent:
    """`event` marked as from the past (and how often it fired then): the marker after its
    subject, before its detail."""
    mark = BEFORE if times < 2 else f"{BEFORE[:-1]}, fired {times}×)"
    head, sep, tail = event.text.partition(": ")
    text = f"{head} {mark}{sep}{tail}" if sep else f"{event.text} {mark}"
    return replace(event, text=text)


def unseen_events(t: float, events: Sequence[Mapping[str, Any]]) -> list[LogEvent]:
    """The log's lines for changes a poll carried without the gateway's stats (Prometheus'
    range: `limits: cap 256 -> 9 (who: not in Prometheus)`): who made them, or why unknown."""

    def who(group: Sequence[Mapping[str, Any]]) -> str:
        names = sorted({str(e["source"]) for e in group if e.get("source")})
        if names:
            return f" (by {', '.join(names)})"
        reasons = sorted({str(e["reason"]) for e in group if e.get("reason")})
        return f" ({'; '.join(reasons)})" if reasons else ""

    limits = [e for e in events if e.get("field") != PAUSED]
    pauses = [e for e in events if e.get("field") == PAUSED]
    out: list[LogEvent] = []
    if limits:
        changes = ", ".join(
            f"{label_of(str(e.get('field')))} {limit_text(str(e.get('field')), e.get('old'))}"
            f" -> {limit_text(str(e.get('field')), e.get('new'))}"
            for e in limits
        )
        out.append(LogEvent(t, "limit", f"limits: {changes}{who(limits)}"))
    for e in pauses:
        text = "admission PAUSED" if e.get("new") else "admission resumed"
        out.append(LogEvent(t, "limit", text + who([e])))
    return out


def who_made(lines: Sequence[LogEvent], events: Sequence[Mapping[str, Any]]) -> list[LogEvent]:
    """One poll's lines (`diff_events`) with who made its limit changes and pauses, from the
    gateway's /admin/events entries that came with that poll (their `source`): `limits: cap 8
    -> 6 (by carol)`, `admission PAUSED (by bob)`, as the past's lines say it. The autopilot is
    not named again on a line that already says `(autopilot: ...)`."""

    def names(fields: Collection[str]) -> list[str]:
        return sorted(
            {str(e["source"]) for e in events if e.get("source") and e.get("field") in fields}
        )

    limits, pauses = names(LIMIT_FIELDS), names((PAUSED,))
    out: list[LogEvent] = []
    for line in lines:
        if line.kind != "limit":
            who: list[str] = []
        elif line.text.startswith("limits: "):
            who = [n for n in limits if n != "autopilot" or "(autopilot: " not in line.text]
        else:
            who = pauses
        out.append(replace(line, text=f"{line.text} (by {', '.join(who)})") if who else line)
    return out


def shown_by(
    prev: Snapshot | None, cur: Snapshot, events: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Those of the gateway's events whose change the gateway's stats show from `prev` to
    `cur`: a limit that moved to the event's new value, a pause or resume. An event the stats
    do not show (a change made in this console, shown when made) attaches to no other line."""
    before = prev.gateway if prev is not None else None
    now = cur.gateway
    if before is None or now is None:
        return []
    out: list[Mapping[str, Any]] = []
    for e in events:
        name = e.get("field")
        if name in LIMIT_FIELDS or name == PAUSED:
            old, new = getattr(before, str(name)), getattr(now, str(name))
            if old != new and new == e.get("new"):
                out.append(e)
    return out


def poll_lines(
    prev: Snapshot | None, snap: Snapshot, events: Sequence[Mapping[str, Any]] = ()
) -> list[LogEvent]:
    """The log's lines for one poll, its gateway's events (`RawPoll.events`) joined: on a poll
    with the gateway's stats, whose diff shows the change, they only say who made it
    (`who_made`); on one without (Prometheus' range), they are the change (`unseen_events`).
    A change is never two lines (as `past_events` and report's `limit_changes`)."""
    lines = diff_events(prev, snap)
    if not events:
        return lines
    if snap.gateway is not None:
        return who_made(lines, events)
    return [*lines, *unseen_events(snap.time, events)]


def past_events(
    snapshots: Sequence[Snapshot],
    who: Mapping[float, Sequence[str]] | None = None,
    unseen: Mapping[float, Sequence[Mapping[str, Any]]] | None = None,
) -> list[LogEvent]:
    """The past's lines for the event log, each marked: every finding's first firing (with how
    often it fired again), every limit change (with who made it, from `who`: poll time -> the
    gateway's events' sources; or from `unseen`: poll time -> changes its snapshot cannot show,
    `PastFold.unseen`), target down and up, restart. A finding that flapped for an hour is one
    line, so the onset stays on screen."""
    out: list[LogEvent] = []
    first: dict[str, int] = {}
    fired: dict[str, int] = {}
    prev: Snapshot | None = None
    for snap in snapshots:
        extra = unseen_events(snap.time, (unseen or {}).get(snap.time, ()))
        for e in [*diff_events(prev, snap), *extra]:
            if e.kind == "cleared":
                continue
            if e.text.startswith("limits: ") and who and who.get(e.time):
                e = replace(e, text=f"{e.text} (by {', '.join(who[e.time])})")
            if e.kind == "fired":
                key = e.text.partition(": ")[0].split(" ")[-1]  # "critical kv-exhausted: ..."
                fired[key] = fired.get(key, 0) + 1
                if key in first:
                    continue
                first[key] = len(out)
            out.append(e)
        prev = snap
    counts = {i: fired[k] for k, i in first.items()}
    return [marked(e, counts.get(i, 1)) for i, e in enumerate(out)]


@dataclass(frozen=True)
class PastState:
    """Where the console's past stands: asked of `source` (gateway, prometheus), loading, in
    (covering `covered_s`), or off and why."""

    source: str | None
    """"gateway" or "prometheus"; None: no source of history for these targets."""
    asked_s: float
    loading: bool = False
    covered_s: float | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()


def past_label(state: PastState | None) -> str:
    """The header's words: `past: gateway 1h`, `past: prometheus 12m of 1h`, `past: gateway
    1h loading…`, `past: none — gateway history off: <why>`."""
    if state is None or state.asked_s <= 0:
        return "past: off"
    if state.source is None:
        return f"past: none — {state.error or 'no gateway or Prometheus to read it from'}"
    asked = span_text(state.asked_s)
    if state.loading and not state.covered_s:
        return f"past: {state.source} {asked} loading…"
    if state.error is not None:
        return f"past: none — {state.source} history off: {state.error}"
    covered = state.covered_s or 0.0
    if covered <= 0:
        return f"past: {state.source} {asked}, nothing in it yet"
    shown = asked if covered >= state.asked_s * 0.95 else f"{span_text(covered)} of {asked}"
    partial = " (partial)" if state.warnings else ""
    more = ", loading…" if state.loading else ""
    return f"past: {state.source} {shown}{partial}{more}"


def connected_line(t: float, state: PastState, polls: int) -> LogEvent:
    """The log's line between the past and the live: where the lines above came from."""
    covered = span_text(state.covered_s or 0.0)
    text = f"connected: the lines above are {covered} of {state.source} history ({polls} polls)"
    return LogEvent(t, "info", text)
