"""`snapshot` names what the TUI, replay and report name: every incident of the library, judged
as a 60 s snapshot window ending just after the finding is due, names the findings the replay
(the TUI's pipeline, which the report reads) names by then. A finding that compares with an
earlier level (prefix-cache-collapse, decode-stall, spec-decode-low) compares with the polls
of the window as the TUI does, not with polls older than the whole window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.pipeline.verdict import judge_window
from llmtop.recording.reader import read_recording
from llmtop.recording.replay import ReplaySource, is_fleet
from llmtop.settings import HealthSettings

LIBRARY = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
INCIDENTS = [e for e in json.loads((LIBRARY / "manifest.json").read_text()) if not e["healthy"]]
WINDOW_S = 60.0


@pytest.mark.slow(10)
@pytest.mark.parametrize("entry", INCIDENTS, ids=[e["recording"] for e in INCIDENTS])
def test_a_snapshot_window_names_what_the_replay_names(entry: dict[str, Any]) -> None:
    health = HealthSettings()
    recording = read_recording(LIBRARY / entry["recording"])
    raws = [recording.raw(i) for i in range(len(recording))]
    t0 = raws[0].time
    end = entry["onset_s"] + max(x["within_s"] for x in entry["expect"]) + 2.0
    window = [r for r in raws if end - WINDOW_S <= r.time - t0 <= end]
    pipeline_class = FleetPipeline if is_fleet(recording) else Pipeline
    verdict = judge_window(window, health, 1.0, pipeline_class=pipeline_class)
    in_snapshot = {w.finding.id for w in (*verdict.findings, *verdict.earlier)}
    replayed = ReplaySource(recording, health).snapshots()
    in_replay = {f.id for s in replayed if s.time - t0 <= end for f in s.findings}
    expected = {x["finding"] for x in entry["expect"]}
    assert expected <= in_replay
    assert expected <= in_snapshot, f"the snapshot missed {sorted(expected - in_snapshot)}"
