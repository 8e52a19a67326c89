"""Messages from the poll worker to the app; a newer snapshot replaces an unprocessed older one."""

from __future__ import annotations

from textual.message import Message

from llmtop.core.base.snapshot import Snapshot


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
