"""Replay a recording: a `SnapshotSource` whose poll() returns the snapshot at the playhead.

RawPolls go through a fresh (Fleet)Pipeline, so findings are today's rules'. Each snapshot is
computed once, in order, and kept; `start_background` does it on a thread, so no key waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.promql.promql_answers import prometheus_replicas
from llmtop.errors import UsageError
from llmtop.recording.reader import Recording
from llmtop.settings import HealthSettings, MonitorSettings

SPEEDS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Playback speeds offered by faster/slower."""
SEEK_S = 10.0
"""Seconds moved by one seek (left/right)."""
GAP_S = 30.0
"""A pause between two polls longer than this (recording stopped, then appended) is skipped
while playing: its first second is shown, then the next poll."""


def clamp_speed(speed: float) -> float:
    """A speed within x1..x60."""
    return min(max(speed, SPEEDS[0]), SPEEDS[-1])


@dataclass(frozen=True)
class Playhead:
    """Where the replay stands, for the timeline."""

    index: int
    polls: int
    time: float
    start: float
    end: float
    speed: float
    paused: bool
    computed: int = 0
    """Polls whose snapshot is computed (replay computes them in the background)."""

    @property
    def at_end(self) -> bool:
        """The last poll is shown."""
        return self.index >= self.polls - 1


def is_fleet(recording: Recording) -> bool:
    """Whether the run watched several engines (the live TUI then ran the fleet pipeline):
    several `--vllm` in the header, several engines in the first poll (`--targets`), or a
    Prometheus' answers (`--prometheus`)."""
    targets = recording.header.get("targets") or {}
    first = recording.raw(0)
    return (
        len(targets.get("vllm") or ()) > 1 or len(first.engines) > 1 or first.prometheus is not None
    )


class ReplaySource:
    """Plays a recording through a fresh Pipeline; implements the TUI's SnapshotSource."""

    def __init__(
        self,
        recording: Recording,
        health: HealthSettings,
        *,
        speed: float = 1.0,
        paused: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not len(recording):
            from llmtop.errors import RecordingError

            raise RecordingError(f"{recording.path} holds no polls")
        self.recording = recording
        self.speed = clamp_speed(speed)
        self.paused = paused
        self.index = 0
        self._clock = clock
        self._pipeline = FleetPipeline(health) if is_fleet(recording) else Pipeline(health)
        self._snapshots: list[Snapshot] = []
        self.events: list[dict[str, Any]] = []
        """The gateway's limit changes in the polls computed so far."""
        self._play_time = recording.times[0]
        self._last_wall: float | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: str | None = None
        """Why the background computation stopped early, if it did."""

    # -- computing -----------------------------------------------------------------------------

    def snapshot(self, i: int) -> Snapshot:
        """The snapshot of poll `i`, computing every poll up to it once."""
        if i < len(self._snapshots):
            return self._snapshots[i]
        with self._lock:
            while len(self._snapshots) <= i:
                raw = self.recording.raw(len(self._snapshots))
                self.events.extend(raw.events)
                if isinstance(self._pipeline, FleetPipeline):  # Prometheus' rows, if any, too
                    snap = self._pipeline.update(raw, prometheus_replicas(raw))
                else:
                    snap = self._pipeline.update(raw)
                self._snapshots.append(snap)
        return self._snapshots[i]

    @property
    def computed(self) -> int:
        """How many polls have their snapshot."""
        return len(self._snapshots)

    def start_background(self) -> None:
        """Compute every snapshot on a thread; until done, the playhead stops at the last one."""
        if self._thread is not None:
            return
        total = len(self.recording)

        def work() -> None:
            try:
                while self.computed < total and not self._stop.is_set():
                    self.snapshot(min(self.computed + 20, total) - 1)  # short holds of the lock
            except Exception as e:  # a bug in a rule must not kill the replay silently
                self.error = f"replay stopped computing at poll {self.computed + 1}: {e}"

        self._thread = threading.Thread(target=work, name="llmtop-replay", daemon=True)
        self._thread.start()

    def _last_reachable(self) -> int:
        if self._thread is None:
            return len(self.recording) - 1
        return max(self.computed - 1, 0)

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot of the recording (for reports)."""
        self.snapshot(len(self.recording) - 1)
        return list(self._snapshots)

    def history(self, window_s: float) -> list[Snapshot]:
        """The snapshots of the `window_s` seconds up to the playhead (current one included)."""
        now = self.snapshot(self.index).time
        first = self.recording.index_at(now - window_s)
        return [s for s in self._snapshots[first : self.index + 1] if s.time >= now - window_s]

    def current(self) -> Snapshot:
        """The snapshot at the playhead."""
        return self.snapshot(self.index)

    # -- SnapshotSource ------------------------------------------------------------------------

    async def poll(self) -> Snapshot:
        """Advance the playhead by the wall time since the last poll x speed; its snapshot."""
        self.advance()
        return self.current()

    async def aclose(self) -> None:
        """Stop the background computation, if any."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- playback ------------------------------------------------------------------------------

    def advance(self) -> None:
        """Move the playhead with the wall clock (no-op while paused)."""
        now = self._clock()
        if self._last_wall is not None and not self.paused:
            times = self.recording.times
            self._play_time += (now - self._last_wall) * self.speed
            last = self._last_reachable()
            self._play_time = min(self._play_time, times[last])
            index = min(self.recording.index_at(self._play_time), last)
            if (
                index < last
                and times[index + 1] - times[index] > GAP_S
                and self._play_time - times[index] >= 1.0
            ):
                index += 1
                self._play_time = times[index]
            self.index = index
        self._last_wall = now

    def _move_to(self, index: int) -> None:
        self.index = min(max(index, 0), self._last_reachable())
        self._play_time = self.recording.times[self.index]
        self._last_wall = self._clock()

    def toggle_pause(self) -> bool:
        """Pause or play; returns True when now paused. Playing at the end restarts."""
        self.paused = not self.paused
        if not self.paused and self.playhead().at_end:
            self._move_to(0)
        self._last_wall = self._clock()
        return self.paused

    def step(self, polls: int) -> None:
        """Pause and move by `polls` (negative: back)."""
        self.paused = True
        self._move_to(self.index + polls)

    def seek(self, seconds: float) -> None:
        """Move by `seconds` of recording time (at least one poll)."""
        times = self.recording.times
        target = self.recording.index_at(times[self.index] + seconds)
        if seconds > 0 and target == self.index:
            target += 1
        self._move_to(target)

    def seek_start(self) -> None:
        """To the first poll."""
        self._move_to(0)

    def seek_end(self) -> None:
        """To the last poll."""
        self._move_to(len(self.recording) - 1)

    def faster(self) -> float:
        """The next speed up (x1, x2, x5, x10, x30, x60); returns it."""
        self.speed = next((s for s in SPEEDS if s > self.speed), SPEEDS[-1])
        return self.speed

    def slower(self) -> float:
        """The next speed down; returns it."""
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0])
        return self.speed

    def playhead(self) -> Playhead:
        """Where the replay stands now."""
        times = self.recording.times
        return Playhead(
            index=self.index,
            polls=len(times),
            time=times[self.index],
            start=times[0],
            end=times[-1],
            speed=self.speed,
            paused=self.paused,
            computed=self.computed,
        )


def open_replay(
    path: str, health: HealthSettings, *, speed: float = 1.0, paused: bool = False
) -> tuple[ReplaySource, MonitorSettings, list[str]]:
    """A recording file as a replay source, the read-only monitor settings it was recorded with
    (targets, interval), and the reader's warnings; a UsageError for a speed outside x1..x60."""
    from llmtop.recording.reader import read_recording

    if not SPEEDS[0] <= speed <= SPEEDS[-1]:
        raise UsageError(f"--speed {speed:g}: must be between 1 and 60")
    recording = read_recording(path)
    source = ReplaySource(recording, health, speed=speed, paused=paused)
    targets = recording.header.get("targets") or {}
    vllm = targets.get("vllm") or ["recorded"]
    monitor = MonitorSettings(
        vllm_urls=tuple(str(u) for u in vllm),
        gateway_url=targets.get("gateway"),
        prometheus_url=targets.get("prometheus"),
        interval_s=float(recording.header.get("interval_s") or 1.0),
        read_only=True,
    )
    return source, monitor, list(recording.warnings)
