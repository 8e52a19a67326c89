"""The fleet: per-replica figures and findings, data-parallel sub-rows, fleet rules, restarts.

Hand-written vLLM 0.32-style scrapes on a fake clock (one poll a second).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Fleet
from llmtop.core.derive.fleet_scrape import split_engines
from llmtop.core.exposition import promtext
from llmtop.core.findings.fleet import _medians_of_others
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings
from tests.support.fleet import KEEP, raw, scrape, url


def run(
    seconds: range, engines_at: Mapping[int, Mapping[str, Any]] | None = None, n: int = 5
) -> tuple[FleetPipeline, list[Fleet]]:
    """Poll n replicas once a second; engines_at[i] overrides replica i's scrape arguments."""
    p = FleetPipeline(HealthSettings())
    fleets = []
    for t in seconds:
        polls = []
        for i in range(n):
            kw = dict((engines_at or {}).get(i, {}))
            polls.append(raw(url(i), None if kw.pop("down", False) else scrape(t, **kw)))
        p.update(RawPoll(time=float(t), engines=tuple(polls)))
        assert p.fleet is not None
        fleets.append(p.fleet)
    return p, fleets


def test_each_replica_has_the_figures_of_a_pipeline_watching_it_alone() -> None:
    load = {0: {"running": 8, "decode": 300.0}, 1: {"running": 2, "decode": 50.0}}
    p = FleetPipeline(HealthSettings())
    alone = [Pipeline(HealthSettings()) for _ in range(2)]
    for t in range(1, 13):
        texts = [scrape(t, **load[i]) for i in range(2)]  # type: ignore[arg-type]
        p.update(RawPoll(time=float(t), engines=tuple(raw(url(i), texts[i]) for i in range(2))))
        single = [
            alone[i].update(RawPoll(time=float(t), engines=(raw(url(i), texts[i]),)))
            for i in range(2)
        ]
    assert p.fleet is not None
    rows = {r.key: r for r in p.fleet.replicas}
    for i in range(2):
        assert rows[url(i)].stats == single[i].engines[0]
        assert rows[url(i)].name == f"10.0.0.{i}:8000"
    assert rows[url(0)].stats.decode_tok_per_s == pytest.approx(300.0)
    assert p.fleet.totals.decode_tok_per_s == pytest.approx(350.0)
    assert p.fleet.totals.running == 10
    assert p.fleet.status == "ok"


def test_a_down_replica_is_named_with_its_error_at_once_and_sorted_first() -> None:
    _, fleets = run(range(1, 6), {3: {"down": True}})
    f = fleets[0].findings[0]  # immediate: at the first poll
    assert f.id == "replica-down"
    assert f.severity == "critical"
    assert "1 of 5 replicas down: 10.0.0.3:8000 (cannot connect" in f.summary
    assert "the other 4 carry their load" in f.action
    assert fleets[-1].replicas[0].name == "10.0.0.3:8000"
    assert fleets[-1].status == "critical"
    assert fleets[-1].totals.up == 4


def test_the_outlier_is_named_with_evidence_after_holding_and_clears() -> None:
    hot = {2: {"waiting": 40, "kv": 1.0, "running": 8}}
    p, fleets = run(range(1, 4), hot)
    assert not any(f.id == "replica-outlier" for f in fleets[1].findings)  # not held 3 s yet
    later = run(range(1, 8), hot)[1][-1]
    f = next(f for f in later.findings if f.id == "replica-outlier")
    assert f.summary.startswith("10.0.0.2:8000 stands out: ")
    assert "waiting 40 vs a median of 0 on the other 4" in f.summary
    assert "KV 100% vs a median of 30% on the other 4" in f.summary
    assert f.bottleneck == "queue"
    assert later.replicas[0].name == "10.0.0.2:8000"  # worst first
    # once it recovers, the finding clears after clear_after_s (10 s), not before
    p = FleetPipeline(HealthSettings())
    cleared_at = None
    for t in range(1, 40):
        fix = t >= 10
        polls = tuple(
            raw(url(i), scrape(t, **({} if fix or i != 2 else hot[2])))  # type: ignore[arg-type]
            for i in range(5)
        )
        p.update(RawPoll(time=float(t), engines=polls))
        assert p.fleet is not None
        active = any(f.id == "replica-outlier" for f in p.fleet.findings)
        if fix and not active and cleared_at is None:
            cleared_at = t
    assert cleared_at == 20


def test_half_the_fleet_high_is_no_outlier() -> None:
    hot = {i: {"waiting": 40, "running": 8} for i in range(3)}
    fleet = run(range(1, 8), hot)[1][-1]
    assert not any(f.id == "replica-outlier" for f in fleet.findings)


def test_load_imbalance_names_busiest_and_idlest() -> None:
    skew = {0: {"running": 30, "waiting": 6}, 1: {"running": 0}, 2: {"running": 2}}
    fleet = run(range(1, 8), skew, n=4)[1][-1]
    f = next(f for f in fleet.findings if f.id == "load-imbalance")
    assert "from 0 on 10.0.0.1:8000 to 36 on 10.0.0.0:8000" in f.summary
    even = run(range(1, 8), {}, n=4)[1][-1]
    assert even.findings == ()


def test_a_restart_is_an_event_with_no_negative_rate_and_no_alert() -> None:
    p = FleetPipeline(HealthSettings())
    for t in range(1, 40):
        since = 25.0 if t >= 25 else 0.0  # replica 1 restarts at t=25: counters back to ~0
        polls = tuple(raw(url(i), scrape(t, since=since if i == 1 else 0.0)) for i in range(3))
        snap = p.update(RawPoll(time=float(t), engines=polls))
        assert p.fleet is not None
        for r in p.fleet.replicas:
            assert r.stats.decode_tok_per_s is None or r.stats.decode_tok_per_s >= 0
        assert snap.findings == (), (t, snap.findings)
    assert p.fleet is not None
    events = p.fleet.events
    assert [(e.kind, e.replica, e.time) for e in events] == [("restart", "10.0.0.1:8000", 25.0)]
    assert "prompt tokens 24,000 -> 0" in events[0].summary


def test_data_parallel_engines_are_sub_rows_under_their_server() -> None:
    p = FleetPipeline(HealthSettings())
    for t in range(1, 9):
        text = scrape(t, engine="0", waiting=1) + scrape(t, engine="1", waiting=30, kv=1.0)
        peers = [raw(url(i), scrape(t, waiting=1)) for i in (1, 2)]
        p.update(RawPoll(time=float(t), engines=(raw(url(0), text), *peers)))
    assert p.fleet is not None
    rows = p.fleet.replicas
    assert [(r.name, r.parent) for r in rows[:3]] == [
        ("10.0.0.0:8000", None),
        ("10.0.0.0:8000#1", url(0)),
        ("10.0.0.0:8000#0", url(0)),
    ]
    assert rows[0].stats.waiting == 31  # the server sums its engines
    assert rows[1].stats.waiting == 30
    assert rows[1].engine == "1"
    outlier = next(f for f in p.fleet.findings if f.id == "replica-outlier")
    assert outlier.summary.startswith("10.0.0.0:8000#1 stands out")
    assert p.fleet.totals.replicas == 3  # servers, not engines


def test_split_engines_keeps_single_engine_scrapes_whole() -> None:
    one = promtext.parse(scrape(5.0), KEEP)
    assert split_engines(one) == {}


def test_replica_findings_are_grouped_by_rule_in_the_snapshot() -> None:
    p = FleetPipeline(HealthSettings())
    for t in range(1, 9):
        polls = tuple(raw(url(i), scrape(t, slow_ttft=i < 2)) for i in range(4))
        snap = p.update(RawPoll(time=float(t), engines=polls))
    assert p.fleet is not None
    slow = [r for r in p.fleet.replicas if r.findings]
    assert {r.name for r in slow} == {"10.0.0.0:8000", "10.0.0.1:8000"}
    grouped = [f for f in snap.findings if f.id == slow[0].findings[0].id]
    assert len(grouped) == 1
    assert grouped[0].summary.startswith("on 2 replicas (10.0.0.0:8000, 10.0.0.1:8000); ")


def test_a_target_that_leaves_is_forgotten() -> None:
    p = FleetPipeline(HealthSettings())
    p.update(RawPoll(time=1.0, engines=(raw(url(0), scrape(1)), raw(url(1), scrape(1)))))
    p.update(RawPoll(time=2.0, engines=(raw(url(0), scrape(2)),)))
    assert p.fleet is not None
    assert [r.key for r in p.fleet.replicas] == [url(0)]
    assert list(p._tracks) == [url(0)]


@given(
    st.lists(
        st.sampled_from([0.0, -0.0, 1.0, 1, 2.5, 3.0, 3, 8.0, 40.0, math.inf, -math.inf])
        | st.floats(-1e3, 1e3, allow_nan=False),
        min_size=2,
        max_size=30,
    )
)
def test_medians_of_the_others_from_one_sort(values: list[float]) -> None:
    """Each replica's median of its peers, from one sort, is statistics.median of the peers:
    the same middle values (equal ones of either sign or type included), the same sum."""
    got = _medians_of_others(values)
    assert got is not None
    for i, median in enumerate(got):
        peers = values[:i] + values[i + 1 :]
        want = statistics.median(peers)
        assert repr(median) == repr(want)
        assert type(median) is type(want)


def test_a_nan_is_left_to_the_sort_per_replica() -> None:
    assert _medians_of_others([1.0, math.nan, 2.0]) is None
    assert _medians_of_others([1.0]) is None
