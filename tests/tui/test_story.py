"""The recorded demo story (tests/fixtures/demo-story.jsonl.gz) is a real run, and each moment
the snapshot tests and screenshots name shows what its name says, by the current rules."""

from __future__ import annotations

from llmtop.core.base.snapshot import Snapshot
from llmtop.settings import HealthSettings
from tests.support import story


def at(moment: str) -> Snapshot:
    return story.upto(story.MOMENTS[moment])[-1]


def ids(snap: Snapshot) -> set[str]:
    return {f.id for f in snap.findings}


def cap_change() -> tuple[float, int, int]:
    """(time, old, new) of the demo's one cap, as the gateway reported it."""
    events = [e for i in range(len(story.recording())) for e in story.recording().raw(i).events]
    (event,) = [e for e in events if e["field"] == "max_concurrency"]
    assert event["source"] == "demo"
    return float(event["time"]), int(event["old"]), int(event["new"])


def test_the_fixture_is_a_recorded_demo_run() -> None:
    rec = story.recording()
    assert rec.warnings == []
    targets = rec.header["targets"]
    assert targets["vllm"][0].startswith("http://127.0.0.1:")  # the demo's own sim
    assert targets["gateway"].startswith("http://127.0.0.1:")
    assert len(rec) >= 200
    assert max(b - a for a, b in zip(rec.times, rec.times[1:], strict=False)) < 3.0
    # every poll scraped the engine and the gateway: no gaps in the story
    for snap in story.snapshots():
        assert all(e.up for e in snap.engines)
        assert snap.gateway is not None
        assert snap.gateway.up


def test_healthy_is_ok_with_no_finding() -> None:
    snap = at("healthy")
    assert snap.status == "ok"
    assert snap.findings == ()
    assert snap.engines[0].running


def test_degrading_warns_before_anything_is_critical() -> None:
    snap = at("degrading")
    assert snap.status == "degraded"
    assert snap.findings
    assert {f.severity for f in snap.findings} == {"warning"}


def test_batching_cliff_fires_at_its_moment() -> None:
    snap = at("batching-cliff")
    assert "batching-cliff" in ids(snap)
    assert snap.status == "critical"


def test_kv_exhausted_is_critical_before_the_cap() -> None:
    snap = at("kv-exhausted")
    assert "kv-exhausted" in ids(snap)
    assert snap.status == "critical"
    t, old, _ = cap_change()
    assert snap.time < t
    assert snap.gateway is not None
    assert snap.gateway.max_concurrency == old


def test_after_the_cap_the_engine_recovers_and_the_queue_is_in_the_gateway() -> None:
    snap = at("after-cap")
    t, _, new = cap_change()
    assert snap.time > t
    assert snap.gateway is not None
    assert snap.gateway.max_concurrency == new
    assert (snap.gateway.queued or 0) > 0
    e = snap.engines[0]
    assert e.waiting == 0
    assert e.ttft_p95_s is not None
    assert e.ttft_p95_s < HealthSettings().slo.ttft_s
    assert "kv-exhausted" not in ids(snap)
    assert snap.status != "critical"
