"""ReplaySource: the playhead in recording time, pause/step/seek/speed, findings recomputed."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from llmtop.core.base.snapshot import Finding
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.errors import RecordingError
from llmtop.recording.reader import read_recording
from llmtop.recording.replay import SPEEDS, ReplaySource
from llmtop.recording.writer import Recorder
from llmtop.settings import HealthSettings, SloSettings
from tests.support.report import CAP_AT, T0, scripted_polls, write_scripted


class FakeClock:
    """Wall time that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    return write_scripted(tmp_path / "r.jsonl.gz")


def _source(path: Path, **kw: object) -> tuple[ReplaySource, FakeClock]:
    clock = FakeClock()
    src = ReplaySource(read_recording(path), HealthSettings(), clock=clock, **kw)  # type: ignore[arg-type]
    return src, clock


async def test_playhead_follows_the_wall_clock_times_speed(recording: Path) -> None:
    src, clock = _source(recording)
    assert (await src.poll()).time == T0
    clock.now += 1
    assert (await src.poll()).time == T0 + 1
    src.faster()
    src.faster()
    assert src.speed == 5
    clock.now += 2
    assert (await src.poll()).time == T0 + 11
    src.toggle_pause()
    clock.now += 30
    assert (await src.poll()).time == T0 + 11
    assert src.toggle_pause() is False
    clock.now += 1
    assert (await src.poll()).time == T0 + 16
    src.speed = 60
    clock.now += 1000
    snap = await src.poll()
    assert snap.time == T0 + 179
    assert src.playhead().at_end
    src.toggle_pause()  # pause at the end
    src.toggle_pause()  # play again from the start
    assert src.current().time == T0


async def test_step_seek_home_end(recording: Path) -> None:
    src, _ = _source(recording)
    src.step(3)
    assert src.paused
    assert src.current().time == T0 + 3
    src.step(-10)
    assert src.current().time == T0
    src.seek(10)
    assert src.current().time == T0 + 10
    src.seek(-4)
    assert src.current().time == T0 + 6
    src.seek_end()
    assert src.current().time == T0 + 179
    src.seek(10)
    assert src.current().time == T0 + 179
    src.seek_start()
    assert src.playhead().index == 0


def test_speeds_stay_between_x1_and_x60(recording: Path) -> None:
    src, _ = _source(recording, speed=500)
    assert src.speed == 60
    assert src.faster() == 60
    seen = [src.slower() for _ in range(len(SPEEDS) + 1)]
    assert seen == [30, 10, 5, 2, 1, 1, 1]


def test_history_is_the_window_before_the_playhead_even_after_seeking_back(
    recording: Path,
) -> None:
    src, _ = _source(recording)
    src.seek_end()
    src.current()
    src.step(-100)
    hist = src.history(30)
    assert [s.time for s in hist] == [T0 + 49 + k for k in range(31)]


def test_findings_are_recomputed_with_the_current_rules(tmp_path: Path) -> None:
    polls = scripted_polls(150)
    stale = Finding("old-rule", "warning", "queue", "an old rule's verdict", "none")
    path = tmp_path / "r.jsonl.gz"
    rec = Recorder(path)
    rec.open()
    for raw in polls:
        rec.write(raw, (stale,))
    rec.close()
    src = ReplaySource(read_recording(path), HealthSettings())
    snaps = src.snapshots()
    expected = Pipeline(HealthSettings())
    assert snaps == [expected.update(raw) for raw in polls]
    ids = {f.id for s in snaps for f in s.findings}
    assert "old-rule" not in ids
    assert "kv-exhausted" in ids
    assert src.recording.findings(0)[0]["id"] == "old-rule"  # kept for reference
    assert [e["field"] for e in src.events] == ["max_concurrency"]
    assert src.events[0]["time"] == T0 + CAP_AT
    # stricter rules give other findings from the same recording
    strict = ReplaySource(
        read_recording(path), HealthSettings(slo=SloSettings(ttft_s=0.1))
    ).snapshots()
    assert any(f.id == "degraded-200" for f in strict[30].findings)
    assert not any(f.id == "degraded-200" for f in snaps[30].findings)


def test_an_empty_recording_is_refused(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "empty.jsonl")
    rec.open()
    rec.close()
    with pytest.raises(RecordingError, match="holds no polls"):
        ReplaySource(read_recording(tmp_path / "empty.jsonl"), HealthSettings())


def test_replay_command_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmtop.cli import main

    assert main(["replay", str(tmp_path / "missing.jsonl.gz")]) == 6
    assert main(["replay", str(tmp_path / "missing.jsonl.gz"), "--speed", "100"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert "recording not found" in err[0]
    assert "between 1 and 60" in err[1]


async def test_background_computation_clamps_the_playhead_until_done(recording: Path) -> None:
    import threading

    src, _ = _source(recording)
    gate, reached = threading.Event(), threading.Event()
    update = src._pipeline.update

    def slow_update(raw: Any) -> Any:
        if src.computed == 50:
            reached.set()
            gate.wait(10)
        return update(raw)

    src._pipeline.update = slow_update  # type: ignore[method-assign]
    src.start_background()
    assert await asyncio.to_thread(reached.wait, 10)
    src.seek_end()
    assert src.playhead().index == 49  # the last computed poll, not a wait
    assert src.playhead().computed == 50
    gate.set()
    await src.aclose()  # joins the thread
    assert src.computed == len(src.recording) or src._stop.is_set()
    src2, _ = _source(recording)
    src2.start_background()
    src2._thread.join(10)  # type: ignore[union-attr]
    assert src2.computed == len(src2.recording)
    src2.seek_end()
    assert src2.current().time == T0 + 179
    assert src2.snapshots() == ReplaySource(read_recording(recording), HealthSettings()).snapshots()


async def test_playing_skips_a_long_gap_between_segments(tmp_path: Path) -> None:
    """Recording stopped at +20 s and started again an hour later: play does not wait an hour."""
    polls = scripted_polls(40)
    later = [dataclasses.replace(p, time=p.time + 3600) for p in polls[20:]]
    path = tmp_path / "gap.jsonl.gz"
    for part in (polls[:20], later):
        rec = Recorder(path)
        rec.open()
        for raw in part:
            rec.write(raw)
        rec.close()
    src, clock = _source(path)
    src.seek(19)
    assert src.current().time == T0 + 19
    await src.poll()
    clock.now += 1
    assert (await src.poll()).time == T0 + 3620  # the gap is skipped
    clock.now += 1
    assert (await src.poll()).time == T0 + 3621
