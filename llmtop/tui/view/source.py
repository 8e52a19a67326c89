"""Where snapshots come from: the live Collector or a recording's replay.

The app only knows this protocol, so `llmtop top`, `llmtop demo` and `llmtop replay` share it.
"""

from __future__ import annotations

from typing import Protocol

from llmtop.core.base.snapshot import Snapshot


class SnapshotSource(Protocol):
    """Something the poll worker awaits once per interval."""

    async def poll(self) -> Snapshot:
        """The next snapshot; may take long (a slow target) or raise (shown, not fatal)."""
        ...

    async def aclose(self) -> None:
        """Release connections; called once when the app exits."""
        ...
