"""The history a pipeline hands its rules, marked when its times rise. Pure.

A look-back over the last minute of ~10 minutes kept (`features._earlier`) bisects a
`RisingHistory` for its slice instead of testing every snapshot; any other sequence (a fleet
replica's deque, a clock that stepped back) is scanned whole, as before. The pipeline vouches
for the order (it counts the steps back it keeps), so nothing is checked per poll.
"""

from __future__ import annotations

from llmtop.core.base.snapshot import Snapshot


class RisingHistory(tuple[Snapshot, ...]):
    """Snapshots, oldest first, each at or after the one before it."""

    __slots__ = ()
