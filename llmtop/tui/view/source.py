"""Where the app's data comes from: snapshots (the live Collector, a recording's replay) and, from
a live source only, what-if predictions. The app knows only these protocols, so `top`, `demo` and
`replay` share it, and their IO (HTTP, the prediction's thread) is built outside tui/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llmtop.core.base.snapshot import Snapshot

if TYPE_CHECKING:  # the what-if itself is imported when first used
    from llmtop.whatif.service import Analysis


class SnapshotSource(Protocol):
    """Something the poll worker awaits once per interval."""

    async def poll(self) -> Snapshot:
        """The next snapshot; may take long (a slow target) or raise (shown, not fatal)."""
        ...

    async def aclose(self) -> None:
        """Release connections; called once when the app exits."""
        ...


@runtime_checkable
class WhatIfSource(Protocol):
    """A source that can also predict limits (`w`, the `:cap N` preview); a replay cannot."""

    async def analyse(self, caps: tuple[int, ...], *, band: bool = False) -> Analysis:
        """The current limits and `caps` predicted from the engine's recent window, never
        blocking the loop; raises LlmtopError (its text shown) while the window fills."""
        ...
