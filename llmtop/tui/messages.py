"""Messages from the workers to the app; a newer snapshot replaces an unprocessed older one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from llmtop.core.base.snapshot import Snapshot

if TYPE_CHECKING:
    from llmtop.recording.replay import ReplaySource


class SnapshotArrived(Message):
    """A poll finished; when the UI is behind, only the newest one is rendered."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived)


class PollFailed(Message):
    """The source raised; the screen keeps the last data, marks it stale and shows why."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PollFailed)


class PastReplayMade(Message):
    """The `h` key's thread made the past's replay (None: there is none, `why`); posted from
    the thread, which never waits on the loop (the app may be quitting)."""

    def __init__(self, replay: ReplaySource | None, why: str | None) -> None:
        super().__init__()
        self.replay = replay
        self.why = why
