"""`r` with the real Recorder: it starts and stops, and each poll while on is written."""

from __future__ import annotations

from pathlib import Path

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.recording.reader import read_recording
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.settings import HealthSettings
from tests.support import story
from tests.support.tui import make_app


class RecordedCollector:
    """Stands in for the Collector: the story's recorded polls through a Pipeline, in order."""

    def __init__(self) -> None:
        self.pipeline = Pipeline(HealthSettings())
        self.i = 0
        self.last_raw: RawPoll | None = None

    async def poll(self) -> Snapshot:
        self.last_raw = story.recording().raw(self.i)
        self.i += 1
        return self.pipeline.update(self.last_raw)

    async def aclose(self) -> None:
        pass


async def test_r_records_polls_to_a_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path, interval_s=0.05)
    collector = RecordedCollector()
    source = RecordingSource(collector, recorder)
    app = make_app(source, history=[], interval_s=0.05, recorder=recorder)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.first_snapshot.wait()
        await pilot.press("r")
        await pilot.pause()
        assert recorder.recording
        assert "REC" in app.query_one("#header").render().plain  # type: ignore[union-attr]
        while recorder.polls_written < 3:
            await pilot.pause(0.05)
        await pilot.press("r")
        await pilot.pause()
        assert not recorder.recording
        assert "REC" not in app.query_one("#header").render().plain
    rec = read_recording(path)
    assert len(rec) >= 3
    # what was written is what the collector read while `r` was on, poll for poll
    first = story.recording().index_at(rec.times[0])
    assert rec.times == story.recording().times[first : first + len(rec)]
    assert rec.raw(len(rec) - 1) == story.recording().raw(first + len(rec) - 1)
