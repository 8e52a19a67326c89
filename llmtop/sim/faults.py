"""Faults the sim can be told to have, so a broken engine's findings are tested end to end.

`--fault NAME[@SECONDS][+FOR]` or, counted from now, `POST /sim/fault`: `scheduler-stuck` (vLLM
#53130), `slow` (each step SLOW_FACTOR x longer), `garbage` (bytes no client takes); docs/sim.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAULTS = ("scheduler-stuck", "slow", "garbage")
SLOW_FACTOR = 5.0
"""How many times longer each engine step takes under the `slow` fault."""
GARBAGE_HEADER_BYTES = 80_000
"""The `garbage` fault's header line: over aiohttp's limit as the gateway sets it (64 KiB)."""


@dataclass(frozen=True)
class Fault:
    """One fault, when it starts (seconds after the engine's start, or after now at run time)
    and for how long (None: for good)."""

    name: str
    after_s: float = 0.0
    for_s: float | None = None


def parse_fault(text: str) -> Fault:
    """`NAME[@SECONDS][+FOR]` -> a Fault; ValueError naming what is wrong."""
    spec = text.strip()
    spec, plus, length = spec.partition("+")
    name, _, when = spec.partition("@")
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r} (known: {', '.join(FAULTS)})")
    try:
        after = float(when) if when else 0.0
        for_s = float(length) if plus else None
    except ValueError:
        example = f"{name}@30" if name == "scheduler-stuck" else f"{name}@30+10"
        raise ValueError(f"fault {text!r}: expected NAME[@SECONDS][+FOR], e.g. {example}") from None
    if not 0 <= after < float("inf"):
        raise ValueError(f"fault {text!r}: the start must be 0 or more seconds")
    if for_s is not None and not 0 < for_s < float("inf"):
        raise ValueError(f"fault {text!r}: the length must be more than 0 seconds")
    if for_s is not None and name == "scheduler-stuck":
        raise ValueError(f"fault {text!r}: scheduler-stuck is for good (no +FOR)")
    return Fault(name, after, for_s)


def parse_faults(text: str) -> tuple[Fault, ...]:
    """Comma-separated faults (`slow@30+20,garbage@60+10`)."""
    return tuple(parse_fault(part) for part in text.split(",") if part.strip())


@dataclass
class FaultSchedule:
    """The faults a running sim has, as (name, start, end) on the engine's clock."""

    windows: list[tuple[str, float, float]] = field(default_factory=list)

    def add(self, fault: Fault, now: float) -> None:
        start = now + fault.after_s
        end = float("inf") if fault.for_s is None else start + fault.for_s
        self.windows.append((fault.name, start, end))

    def active(self, name: str, now: float) -> bool:
        return any(n == name and start <= now < end for n, start, end in self.windows)

    def starts(self, name: str) -> float | None:
        """When the first window of `name` starts (None: never)."""
        found = [start for n, start, _ in self.windows if n == name]
        return min(found) if found else None
