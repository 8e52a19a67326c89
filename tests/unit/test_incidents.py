"""core.output.incidents: the one computation of what changed between two snapshots, and its readers
(the TUI's event log, the headless demo's timeline, the report's finding spans)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, Snapshot
from llmtop.core.output.incidents import GATEWAY, gateway_changes, incidents, timeline
from llmtop.demo.headless import finding_events
from llmtop.recording.report import finding_spans
from llmtop.tui.view.present import diff_events

KV = Finding("kv-pressure", "warning", "kv", "KV cache 97%", "lower the cap")
DOWN = Finding("target-down", "critical", "target", "engine down", "check it")
ENGINE = EngineStats(url="http://e:8000", up=True, version="0.32.0", model="m")
GW = GatewayStats(url="http://g:9000", up=True, max_concurrency=16, max_queue=64, paused=False)


def snap(
    t: float, *findings: Finding, engine: EngineStats = ENGINE, gw: GatewayStats = GW
) -> Snapshot:
    return Snapshot(time=t, engines=(engine,), gateway=gw, findings=findings)


def test_first_poll_fires_every_finding_and_nothing_else() -> None:
    found = incidents(None, snap(1.0, KV, DOWN))
    assert [(i.kind, i.subject, i.time) for i in found] == [
        ("finding_fired", "kv-pressure", 1.0),
        ("finding_fired", "target-down", 1.0),
    ]


def test_fired_cleared_limits_pause_and_targets_in_one_list() -> None:
    before = snap(1.0, KV)
    after = snap(
        2.0,
        DOWN,
        engine=replace(ENGINE, version="0.33.0"),
        gw=replace(GW, max_concurrency=8, rate_limit_rpm=60.0, paused=True),
    )
    found = incidents(before, after)
    assert [(i.kind, i.subject, i.old, i.new) for i in found] == [
        ("finding_fired", "target-down", None, None),
        ("finding_cleared", "kv-pressure", None, None),
        ("engine_restarted", "http://e:8000", "0.32.0@m", "0.33.0@m"),
        ("limit_changed", "max_concurrency", 16, 8),
        ("limit_changed", "rate_limit_rpm", None, 60.0),
        ("paused", "paused", False, True),
    ]
    assert found[1].finding == KV  # a cleared finding carries what it last said


def test_targets_down_and_back_up() -> None:
    down = snap(
        2.0, engine=replace(ENGINE, up=False, error="refused"), gw=GatewayStats(url="g", up=False)
    )
    found = incidents(snap(1.0), down)
    assert [(i.kind, i.subject, i.detail) for i in found] == [
        ("target_down", "http://e:8000", "refused"),
        ("target_down", GATEWAY, "no answer"),
    ]
    back = incidents(down, snap(3.0))
    assert [(i.kind, i.subject) for i in back] == [
        ("target_up", "http://e:8000"),
        ("target_up", GATEWAY),
    ]


def test_unknown_pause_state_is_not_a_change() -> None:
    assert gateway_changes(replace(GW, paused=None), GW, 1.0) == []


def test_the_three_readers_agree_on_fired_and_cleared() -> None:
    run = [snap(1.0), snap(2.0, KV), snap(3.0, KV), snap(4.0)]
    kinds = [(i.kind, i.subject, i.time) for i in timeline(run)]
    assert kinds == [("finding_fired", "kv-pressure", 2.0), ("finding_cleared", "kv-pressure", 4.0)]
    log = [e.text for a, b in pairwise(run) for e in diff_events(a, b)]
    assert log == ["warning kv-pressure: KV cache 97%", "cleared kv-pressure"]
    demo = [e["kind"] for a, b in pairwise(run) for e in finding_events(b.time, a, b)]
    assert demo == ["finding_fired", "finding_cleared"]
    (span,) = finding_spans(run)
    assert (span.id, span.fired, span.cleared) == ("kv-pressure", 2.0, 4.0)


def test_event_log_words_limits_on_one_line() -> None:
    lines = diff_events(snap(1.0), snap(2.0, gw=replace(GW, max_concurrency=8, max_queue=32)))
    assert [(e.kind, e.text) for e in lines] == [("limit", "limits: cap 16 -> 8, queue 64 -> 32")]
