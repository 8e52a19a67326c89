"""`llmtop snapshot` of several replicas: the fleet's findings set its status and exit code.

Before, the window went through the plain Pipeline: a replica drowning beside two idle ones
(replica-outlier, load-imbalance) only showed in the JSON's "fleet" object and the command
exited 0. Virtual time, scrapes built as vLLM 0.32 writes them (tests/unit/test_fleet.py).
"""

from __future__ import annotations

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import FleetSnapshot
from llmtop.core.output.fleet_json import fleet_json
from llmtop.core.output.summary import EXIT_CODES, to_json, to_text
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.verdict import judge_window
from llmtop.settings import HealthSettings
from tests.support.fleet import raw, scrape, url


def window(hot: dict[str, float], seconds: int = 6, n: int = 3) -> list[RawPoll]:
    """n replicas polled once a second; replica 2 scraped with `hot`'s figures."""
    return [
        RawPoll(
            time=float(t),
            engines=tuple(raw(url(i), scrape(t, **(hot if i == 2 else {}))) for i in range(n)),  # type: ignore[arg-type]
        )
        for t in range(1, seconds + 1)
    ]


def test_a_drowning_replica_makes_the_fleet_snapshot_degraded_not_ok() -> None:
    polls = window({"waiting": 40})
    plain = judge_window(polls, HealthSettings(), 1.0)
    assert plain.last.status == "ok"  # what a fleet snapshot used to exit with: 0
    w = judge_window(polls, HealthSettings(), 1.0, pipeline_class=FleetPipeline)
    assert w.last.status == "degraded"
    assert EXIT_CODES[w.last.status] == 1
    ids = [f.finding.id for f in w.findings]
    assert ids == ["replica-outlier", "load-imbalance"]
    outlier = w.findings[0].finding.summary
    assert outlier.startswith("10.0.0.2:8000 stands out: waiting 40 vs a median of 0")
    # text and JSON say the same, and the JSON's fleet object is that same poll's
    data = to_json(w)
    assert data["status"] == "degraded"
    assert [f["id"] for f in data["findings"]] == ids
    assert "status DEGRADED" in to_text(w)
    assert "WARNING replica-outlier" in to_text(w)
    assert isinstance(w.last, FleetSnapshot)
    assert w.last.fleet is not None
    fleet = fleet_json(w.last.fleet)
    assert fleet["status"] == data["status"]
    assert fleet["replicas"][0]["name"] == "10.0.0.2:8000"
    assert next(e["url"] for e in data["engines"]) == url(2)  # worst first, as the fleet


def test_a_down_replica_is_critical_and_a_healthy_fleet_stays_ok() -> None:
    healthy = judge_window(window({}), HealthSettings(), 1.0, pipeline_class=FleetPipeline)
    assert healthy.last.status == "ok"
    assert not healthy.findings
    polls = [
        RawPoll(
            time=p.time,
            engines=(*p.engines[:2], raw(url(2), None)),
        )
        for p in window({})
    ]
    w = judge_window(polls, HealthSettings(), 1.0, pipeline_class=FleetPipeline)
    assert w.last.status == "critical"
    assert EXIT_CODES[w.last.status] == 2
    assert w.findings[0].finding.id == "replica-down"
    assert "1 of 3 replicas down: 10.0.0.2:8000" in w.findings[0].finding.summary
