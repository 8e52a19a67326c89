"""Pure view logic: badge, queue location, timeline diffs, the command language, formatting."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, Snapshot
from llmtop.core.derive.aggregate import combine
from llmtop.core.health.kvsize import kv_fit
from llmtop.errors import UsageError
from llmtop.tui.view.commands import (
    QUEUE_STEP,
    parse_command,
    step_concurrency,
    step_queue,
)
from llmtop.tui.view.present import (
    badge,
    diff_events,
    is_stale,
    queue_location,
    sorted_findings,
)
from tests.support import story

E = EngineStats(url="http://e:8000", up=True, running=8, waiting=0)
G = GatewayStats(url="http://g:9000", up=True, in_flight=8, queued=0, max_concurrency=8)


def test_badge_follows_status_and_down() -> None:
    assert badge(Snapshot(time=0, engines=(E,), status="ok")) == "OK"
    assert badge(Snapshot(time=0, engines=(E,), status="degraded")) == "DEGRADED"
    assert badge(Snapshot(time=0, engines=(E,), status="critical")) == "CRITICAL"
    down = replace(E, up=False, error="connection refused")
    assert badge(Snapshot(time=0, engines=(down,), status="critical")) == "DOWN"
    assert badge(Snapshot(time=0, engines=(E,), status="unknown")) == "UNKNOWN"
    assert badge(Snapshot(time=0, engines=(E,), status="ok"), stale=True) == "DEGRADED"


def test_stale_after_two_intervals() -> None:
    assert not is_stale(1.9, 1.0)
    assert is_stale(2.1, 1.0)
    assert not is_stale(None, 1.0)


def test_queue_location_names_where_requests_wait() -> None:
    assert queue_location(E, G) == "no queue"
    assert queue_location(replace(E, waiting=12), G) == "queue in the ENGINE"
    assert queue_location(E, replace(G, queued=30)) == "queue in the GATEWAY"
    assert "BOTH" in queue_location(replace(E, waiting=2), replace(G, queued=3))
    assert queue_location(replace(E, waiting=None), None) == "queue: n/a"


def test_unknown_stays_unknown() -> None:
    assert fmt.dur(None) == fmt.num(None) == fmt.pct(None) == fmt.per_s(None) == "n/a"
    assert kv_fit(E) is None
    fits = kv_fit(
        replace(E, kv_capacity_tokens=38_800, mean_prompt_tokens=4000, mean_generation_tokens=256)
    )
    assert fits == 8  # the number kv-exhausted's action suggests, not a second opinion


def test_formatting_units() -> None:
    assert fmt.dur(0.0421) == "42ms"
    assert fmt.dur(1.234) == "1.23s"
    assert fmt.dur(55.0) == "55.0s"
    assert fmt.dur(125) == "2m05s"
    assert fmt.num(38_800) == "38.8k"
    assert fmt.num(262) == "262"
    assert fmt.pct(0.934) == "93%"


def test_combine_sums_counts_and_keeps_worst_latency() -> None:
    a = replace(E, running=4, waiting=1, ttft_p95_s=0.5, kv_cache_usage_frac=0.5)
    b = replace(
        E, url="http://f:8000", running=6, waiting=2, ttft_p95_s=3.0, kv_cache_usage_frac=0.9
    )
    c = combine([a, b])
    assert c is not None
    assert (c.running, c.waiting, c.ttft_p95_s, c.kv_cache_usage_frac) == (10, 3, 3.0, 0.9)
    assert combine([a]) is a
    assert combine([]) is None


def test_findings_most_severe_first() -> None:
    # placeholders: this is the sort, not a rule (the rules' own findings come from replays)
    w = Finding("rule-a", "warning", "queue", "evidence", "advice", since=1)
    c = Finding("rule-b", "critical", "kv", "evidence", "advice", since=5)
    assert [f.id for f in sorted_findings([w, c])] == ["rule-b", "rule-a"]


def test_diff_events_fired_cleared_and_limits() -> None:
    f = Finding("rule-b", "critical", "kv", "evidence", "advice", since=1)
    s0 = Snapshot(time=1, engines=(E,), gateway=G)
    s1 = replace(s0, time=2, findings=(f,))
    s2 = replace(s1, time=3, findings=(), gateway=replace(G, max_concurrency=4, paused=True))
    fired = diff_events(s0, s1)
    assert [(e.kind, e.text) for e in fired] == [("fired", "critical rule-b: evidence")]
    later = diff_events(s1, s2)
    texts = [e.text for e in later]
    assert "cleared rule-b" in texts
    assert "limits: cap 8 -> 4" in texts
    assert diff_events(s2, s2) == []


def test_diff_events_target_down_and_back() -> None:
    s0 = Snapshot(time=1, engines=(E,))
    s1 = Snapshot(time=2, engines=(replace(E, up=False, error="connection refused"),))
    assert diff_events(s0, s1)[0].text == "engine http://e:8000 down: connection refused"
    assert diff_events(s1, s0)[0].text == "engine http://e:8000 back up"


def test_the_replayed_story_logs_each_finding_and_the_cap_where_they_happen() -> None:
    """The event log of the recorded demo: each finding the rules fire is logged at the poll
    it appears, each clearing at the poll it goes, and the cap at the poll it first shows."""
    snaps = story.snapshots()
    log = [(b.time, e) for a, b in itertools.pairwise(snaps) for e in diff_events(a, b)]

    def logged(t: float, kind: str, part: str) -> bool:
        return any(at == t and e.kind == kind and part in e.text for at, e in log)

    checked = 0
    for a, b in itertools.pairwise(snaps):
        before, now = {f.id for f in a.findings}, {f.id for f in b.findings}
        for fid in now - before:
            assert logged(b.time, "fired", f" {fid}: "), (b.time - snaps[0].time, fid)
        for fid in before - now:
            assert logged(b.time, "cleared", fid), (b.time - snaps[0].time, fid)
        checked += len(now ^ before)
    caps = [(s.time, s.gateway.max_concurrency) for s in snaps if s.gateway is not None]
    (t, old, new), *_ = [(t1, a, b) for (_, a), (t1, b) in itertools.pairwise(caps) if a != b]
    assert logged(t, "limit", f"cap {old} -> {new}")
    assert checked >= 4  # the story fires and clears findings
    assert len([e for _, e in log if e.kind == "limit"]) == 1  # the demo capped once


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cap 8", {"max_concurrency": 8}),
        (":queue 64", {"max_queue": 64}),
        ("timeout 20", {"queue_timeout_s": 20.0}),
        ("timeout 2.5", {"queue_timeout_s": 2.5}),
        ("rpm 600", {"rate_limit_rpm": 600.0}),
        ("rpm off", {"rate_limit_rpm": None}),
        ("tokens 32000", {"max_inflight_prompt_tokens": 32000}),
        ("tokens off", {"max_inflight_prompt_tokens": None}),
        ("pause", "pause"),
        ("resume", "resume"),
    ],
)
def test_parse_command(text: str, expected: object) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "commands:"),
        ("cap", "usage: cap N"),
        ("cap eight", "expected a whole number"),
        ("frobnicate 3", "unknown command"),
        ("cap off", "expected a whole number"),
    ],
)
def test_parse_command_errors_are_one_line(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        parse_command(text)
    assert "\n" not in str(info.value)


def test_key_steps() -> None:
    assert step_concurrency(8, 1) == 9
    assert step_concurrency(1, -1) == 1
    # a wide-open cap comes down fast, then fine steps near the KV arithmetic's answer
    presses, cap = 0, 256
    while cap > 8:
        cap, presses = step_concurrency(cap, -1), presses + 1
    assert (cap, presses) == (8, 12)
    assert step_concurrency(16, -1) == 15
    assert step_concurrency(16, 1) == 32
    assert step_concurrency(40, -1) == 20
    assert step_queue(128, 1) == 128 + QUEUE_STEP
    assert step_queue(4, -1) == 0
    with pytest.raises(UsageError):
        step_concurrency(None, 1)


def test_chart_ticks_are_round() -> None:
    from llmtop.tui.view.chart_data import nice_step, x_ticks, y_ticks

    assert nice_step(55) == 20
    assert nice_step(3.3) == 1
    ticks, labels = y_ticks(55.0, "s")
    assert ticks[0] == 0
    assert ticks[-1] >= 55
    assert labels[-1] == "60.0s"
    assert labels[0] == "0"
    xt, xl = x_ticks(-239.0)
    assert xt[-1] == 0
    assert xl[-1] == "now"
    assert xl[0] == "-3m"


def test_thin_keeps_the_newest_and_the_span() -> None:
    from llmtop.tui.view.chart_data import thin

    snaps = list(story.snapshots())
    few = thin(snaps, 40)
    assert len(few) == 40
    assert few[-1] is snaps[-1]
    assert few[0].time - snaps[0].time < 10
    assert [s.time for s in few] == sorted(s.time for s in few)
    assert thin(snaps, 0) == snaps


def test_help_explains_every_finding_the_rules_can_fire() -> None:
    from llmtop.core.findings.catalog import RULES
    from llmtop.tui.screens.help import HELP_TEXT

    missing = [r.id for r in RULES if f"**{r.id}**" not in HELP_TEXT]
    assert missing == []


def test_an_autopilot_move_is_logged_with_its_reason() -> None:
    base = Snapshot(time=1, engines=(E,))
    g = GatewayStats(url="http://gw", up=True, mode="auto", max_inflight_kv_blocks=2907)
    prev = replace(base, gateway=g)
    moved = replace(
        g,
        max_inflight_kv_blocks=2592,
        autopilot_reason="KV budget 2,907 -> 2,592 blocks: preempting 2.0/s",
    )
    cur = replace(base, time=base.time + 1, gateway=moved)
    texts = [e.text for e in diff_events(prev, cur)]
    assert any("2907 -> 2592 (autopilot: preempting 2.0/s)" in t for t in texts), texts
