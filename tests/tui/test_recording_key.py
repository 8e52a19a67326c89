"""`r` with the real Recorder: it starts and stops, and each poll while on is written."""

from __future__ import annotations

from pathlib import Path

from llmtop.core.raw import RawPoll
from llmtop.core.snapshot import Snapshot
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.tui.scripted import upto
from tests.tui.conftest import make_app


class FakeCollector:
    """Stands in for the Collector: scripted snapshots and a RawPoll for each."""

    def __init__(self) -> None:
        self.snaps = upto("healthy")
        self.i = 0
        self.last_raw: RawPoll | None = None

    async def poll(self) -> Snapshot:
        snap = self.snaps[min(self.i, len(self.snaps) - 1)]
        self.i += 1
        self.last_raw = RawPoll(time=snap.time + self.i)
        return snap

    async def aclose(self) -> None:
        pass


async def test_r_records_polls_to_a_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path, interval_s=0.05)
    source = RecordingSource(FakeCollector(), recorder)
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
        assert "REC" not in app.query_one("#header").render().plain  # type: ignore[union-attr]
    lines = path.read_text().splitlines()
    assert len(lines) >= 4  # a header line, then one line a poll
