"""Where snapshots come from: the live Collector, a recording, or a script (tests, screenshots).

The app only knows this protocol, so `llmtop top`, `llmtop demo` and `llmtop replay` share it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from llmtop.core.snapshot import Snapshot


class SnapshotSource(Protocol):
    """Something the poll worker awaits once per interval."""

    async def poll(self) -> Snapshot:
        """The next snapshot; may take long (a slow target) or raise (shown, not fatal)."""
        ...

    async def aclose(self) -> None:
        """Release connections; called once when the app exits."""
        ...


class ScriptedSource:
    """Plays a fixed list of snapshots, then repeats the last one (tests and screenshots)."""

    def __init__(self, snapshots: Sequence[Snapshot], *, delay_s: float = 0.0) -> None:
        if not snapshots:
            raise ValueError("ScriptedSource needs at least one snapshot")
        self._snapshots = list(snapshots)
        self._next = 0
        self.delay_s = delay_s
        """Seconds each poll takes (a slow target)."""
        self.polls = 0
        self.closed = False

    async def poll(self) -> Snapshot:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.polls += 1
        snap = self._snapshots[min(self._next, len(self._snapshots) - 1)]
        self._next += 1
        return snap

    async def aclose(self) -> None:
        self.closed = True
