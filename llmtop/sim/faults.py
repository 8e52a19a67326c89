"""Faults the sim can be told to have, so a finding about a broken engine is tested end to end.

`--fault NAME[@SECONDS]`: the fault starts SECONDS after the sim does (0 when not given).

- `scheduler-stuck`: the scheduler stops admitting waiting requests, for good, as vLLM issue
  #53130 reports a real engine doing. Running requests finish; new ones wait forever; /health,
  /v1/models and /metrics answer as before; the KV cache empties as the running ones finish.
"""

from __future__ import annotations

from dataclasses import dataclass

FAULTS = ("scheduler-stuck",)


@dataclass(frozen=True)
class Fault:
    """One fault and when it starts, in seconds after the engine's start."""

    name: str
    after_s: float = 0.0


def parse_fault(text: str) -> Fault:
    """`NAME[@SECONDS]` -> a Fault; ValueError naming what is wrong."""
    name, _, when = text.strip().partition("@")
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r} (known: {', '.join(FAULTS)})")
    try:
        after = float(when) if when else 0.0
    except ValueError:
        raise ValueError(f"fault {text!r}: expected NAME@SECONDS, e.g. {name}@30") from None
    if not 0 <= after < float("inf"):
        raise ValueError(f"fault {text!r}: the start must be 0 or more seconds")
    return Fault(name, after)
