"""The console's past, pure parts: the demo story's polls before the console opened, folded into
a fresh pipeline, then live polls; the marked event lines, the header's words, spans. Fake
clocks only: the times are the recording's."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.past import PastFold, onto_live
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.pipeline.span import parse_span, span_text
from llmtop.errors import UsageError
from llmtop.settings import HealthSettings
from llmtop.tui.view.past import BEFORE, PastState, connected_line, marked, past_events, past_label
from llmtop.tui.view.present import LogEvent, diff_events
from tests.support import story

OPENED = 200
"""The console opens at the story's poll 200: after the onset (~74 s), kv-exhausted's firing
(~77 s) and the cap set at poll 151."""


@functools.cache
def polls() -> tuple[RawPoll, ...]:
    return tuple(story.recording())


@functools.cache
def watched() -> tuple[Snapshot, ...]:
    """Every snapshot of a console that watched the whole story."""
    p = Pipeline(HealthSettings())
    return tuple(p.update(r) for r in polls())


def test_spans() -> None:
    assert [parse_span(x) for x in ("1h", "30m", "90s", "90", "1.5h", "2d")] == [
        3600.0,
        1800.0,
        90.0,
        90.0,
        5400.0,
        172800.0,
    ]
    with pytest.raises(UsageError, match="--past 'an hour'"):
        parse_span("an hour")
    assert [span_text(s) for s in (3600, 5400, 600, 45, 150, 7200)] == [
        "1h",
        "1h30m",
        "10m",
        "45s",
        "2m30s",
        "2h",
    ]


def test_the_past_then_live_is_what_watching_all_along_gives() -> None:
    """Windows and hysteresis start full: each live snapshot after the fold is the one a
    console open since the start computed (findings that need a window included)."""
    past, live = polls()[:OPENED], polls()[OPENED : OPENED + 5]
    fold = PastFold(Pipeline(HealthSettings()), past)
    assert fold.run(step=50) is False  # in slices: the caller's loop turns between them
    while not fold.run(step=50):
        pass
    assert len(fold.snapshots) == OPENED
    assert fold.skipped == 0
    got = [fold.pipeline.update(r) for r in live]
    assert got == list(watched()[OPENED : OPENED + 5])
    assert {f.id for f in got[0].findings} == {"gateway-saturated"}  # after the cap
    cold = Pipeline(HealthSettings()).update(live[0])
    assert not cold.findings  # what the console showed at its first frame without a past


def test_live_polls_seen_before_a_late_past_are_refolded_after_it() -> None:
    past, live = polls()[:OPENED], polls()[OPENED : OPENED + 3]
    late = polls()[OPENED + 10 : OPENED + 20]  # the history runs past the first live poll
    fold = PastFold(Pipeline(HealthSettings()), (*past, *late), live=live)
    fold.run()
    assert fold.skipped == len(late)
    assert fold.live_snapshots == list(watched()[OPENED : OPENED + 3])


def test_a_clock_step_back_in_the_past_is_left_out_and_counted() -> None:
    past = list(polls()[:20])
    stepped = dataclasses.replace(past[10], time=past[3].time)
    fold = PastFold(Pipeline(HealthSettings()), [*past[:10], stepped, *past[11:]])
    fold.run()
    assert fold.skipped == 1
    assert len(fold.snapshots) == 19


def test_the_gateways_upstream_is_the_consoles_engine() -> None:
    raw = RawPoll(time=1.0, engines=(RawEngine("http://10.0.0.7:8000", ()),))
    (named,) = onto_live([raw], ["http://gpu-box:8000"])
    assert named.engines[0].url == "http://gpu-box:8000"
    two = RawPoll(time=1.0, engines=(RawEngine("http://a", ()), RawEngine("http://b", ())))
    assert onto_live([two], ["http://gpu-box:8000"]) == [two]  # several: as they are
    assert onto_live([raw], ["http://x", "http://y"]) == [raw]


def test_what_fired_before_you_connected_is_in_the_log_with_its_time() -> None:
    snaps = watched()[:OPENED]
    lines = past_events(snaps)
    assert lines
    assert all(BEFORE[:-1] in e.text for e in lines)
    fired = {e.text.split(f" {BEFORE[:-1]}")[0]: e.time for e in lines if e.kind == "fired"}
    assert len(fired) == len([e for e in lines if e.kind == "fired"])  # each finding once
    first_kv = next(s for s in snaps if any(f.id == "kv-exhausted" for f in s.findings))
    severity = next(f.severity for f in first_kv.findings if f.id == "kv-exhausted")
    assert fired[f"{severity} kv-exhausted"] == first_kv.time
    onset = next(s for s in snaps if s.findings)
    assert min(fired.values()) == onset.time
    (limit,) = [e for e in lines if e.kind == "limit"]
    assert limit.text.startswith(f"limits {BEFORE}: ")
    assert "256 -> 9" in limit.text
    assert limit.time == snaps[151].time
    # the live log goes on from the past's last moment: an ongoing finding does not fire again
    assert not [e for e in diff_events(snaps[-1], watched()[OPENED]) if e.kind == "fired"]


def test_the_marker_comes_before_the_detail() -> None:
    e = LogEvent(5.0, "fired", "critical kv-exhausted: KV cache 97% full, 12 waiting")
    assert marked(e).text == f"critical kv-exhausted {BEFORE}: KV cache 97% full, 12 waiting"
    assert marked(LogEvent(5.0, "cleared", "cleared x")).text == f"cleared x {BEFORE}"
    again = marked(e, times=9).text
    assert again.startswith("critical kv-exhausted (before you connected, fired 9×): KV")


def test_the_header_says_where_the_past_comes_from() -> None:
    assert past_label(PastState("gateway", 3600.0, covered_s=3600.0)) == "past: gateway 1h"
    assert past_label(PastState("prometheus", 3600.0, covered_s=3599.0)) == "past: prometheus 1h"
    assert past_label(PastState("gateway", 3600.0, covered_s=720.0)) == "past: gateway 12m of 1h"
    empty = PastState("gateway", 3600.0, covered_s=0.0)
    assert past_label(empty) == "past: gateway 1h, nothing in it yet"
    assert past_label(PastState("gateway", 3600.0, loading=True)) == "past: gateway 1h loading…"
    off = PastState("gateway", 3600.0, error="keeps no history now (503)")
    assert past_label(off) == "past: none — gateway history off: keeps no history now (503)"
    partial = PastState("prometheus", 1800.0, covered_s=1800.0, warnings=("quantiles failed",))
    assert past_label(partial) == "past: prometheus 30m (partial)"
    assert past_label(PastState(None, 3600.0, error="no gateway")).startswith("past: none — no")
    line = connected_line(9.0, PastState("gateway", 3600.0, covered_s=600.0), 600)
    assert line.text == "connected: the lines above are 10m of gateway history (600 polls)"


def test_a_limit_change_says_who_made_it() -> None:
    fold = PastFold(Pipeline(HealthSettings()), polls()[:OPENED])
    fold.run()
    assert fold.who == {polls()[151].time: ("demo",)}  # the gateway's event: its source
    (limit,) = [e for e in past_events(fold.snapshots, fold.who) if e.kind == "limit"]
    assert limit.text == f"limits {BEFORE}: cap 256 -> 9 (by demo)"


def test_a_polls_events_say_who_or_are_the_change_never_both() -> None:
    from llmtop.tui.view.past import poll_lines

    snaps = watched()
    cap = {"time": polls()[151].time, "field": "max_concurrency", "old": 256, "new": 9}
    # the gateway's stats show the change: its event only says who
    with_who = poll_lines(snaps[150], snaps[151], [{**cap, "source": "carol"}])
    assert [e.text for e in with_who if e.kind == "limit"] == ["limits: cap 256 -> 9 (by carol)"]
    assert [e.text for e in poll_lines(snaps[150], snaps[151])] == [
        e.text for e in diff_events(snaps[150], snaps[151])
    ]
    # Prometheus' range: no stats, the event is the change, who unknown and why
    bare = [dataclasses.replace(s, gateway=None) for s in snaps[150:152]]
    unseen = [{**cap, "source": None, "reason": "who: not in Prometheus"}]
    lines = poll_lines(bare[0], bare[1], unseen)
    assert [e.text for e in lines if e.kind == "limit"] == [
        "limits: cap 256 -> 9 (who: not in Prometheus)"
    ]
    assert all(e.time == snaps[151].time for e in lines)
