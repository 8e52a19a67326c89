"""`llmtop snapshot`'s window: the polls across it, each finding with when it held, the KV
peaks, and the verdict from the last poll. Pure types (core.pipeline.verdict makes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtop.core.base.snapshot import Finding, Snapshot, Status


@dataclass(frozen=True)
class WindowFinding:
    """A finding across the polls of a window: when it held, and what the rules said last."""

    finding: Finding
    """As the rules stated it at the poll `last_s`: its summary's figures are that poll's."""
    first_s: float
    """Seconds after the window's first poll that it first held."""
    last_s: float
    """Seconds after the window's first poll that it last held."""
    held_polls: int
    """How many of the window's polls it held at."""


@dataclass(frozen=True)
class KvPeak:
    """An engine's highest KV usage over the window: what `kv-exhausted` reads, with its poll."""

    frac: float
    at_s: float
    """Seconds after the window's first poll."""


@dataclass(frozen=True)
class WindowSnapshot:
    """`llmtop snapshot`: polls across a window, and a verdict that says which poll it is from.

    The figures, the status and `findings` are the last poll's (its rates and quantiles span
    the whole window, and the rules there look back over the window's polls); `earlier` holds
    the findings that held at an earlier poll and not at the last, each with its own figures.
    """

    last: Snapshot
    start: float
    """Time of the first poll (seconds since the epoch)."""
    polls: int
    interval_s: float
    """The poll interval asked for (the monitor's)."""
    findings: tuple[WindowFinding, ...] = ()
    earlier: tuple[WindowFinding, ...] = ()
    kv_peaks: dict[str, KvPeak] = field(default_factory=dict)
    """Engine URL -> its KV peak over the window (engines with a known KV usage only)."""

    @property
    def span_s(self) -> float:
        """Seconds from the first poll to the last."""
        return self.last.time - self.start

    @property
    def status(self) -> Status:
        """The last poll's status: the verdict the exit code follows."""
        return self.last.status
