"""What a virtual-time run is given (llmtop/whatif/model/simulate.py): the present it starts from
(`State`, and the ages of its queue), the spans it measures, the limit changes on the way, and
the Poisson arrivals. Plain values and pure draws, apart from the run that steps them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llmtop.gateway.admission.limits import Limits


@dataclass(frozen=True)
class State:
    """What is in the system when the prediction starts ("now"): none = an empty system."""

    at_engine: int
    """Requests running or waiting at the engine (they stay there whatever the new cap)."""
    queued: int
    """Requests waiting in the gateway's queue."""
    oldest_wait_s: float
    """How long the oldest queued request has waited (the queue's ages spread from it to 0
    where `queued_ages_s` does not list them)."""
    running: int = 0
    """Of `at_engine`, how many are running (prompt in the KV cache, decoding); the rest wait
    at the engine for their prefill."""
    queued_ages_s: tuple[float, ...] = ()
    """The ages of the gateway's queued requests, in the order they will be admitted, as the
    gateway reports them (/admin/stats `queued_ages_s`); empty when not reported."""


@dataclass(frozen=True)
class Span:
    """Virtual seconds [start_s, end_s) whose arrivals (and steps, and output) are measured."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class Change:
    """New limits applied at `at_s`, as PATCH /admin/limits does live."""

    at_s: float
    limits: Limits


def arrival_times(rng: random.Random, rate: float, end: float, expected: bool) -> list[float]:
    """Poisson arrivals on [0, end). With `expected`, given their expected count: a Poisson
    process conditioned on its count is that many uniform times, so the burstiness stays and
    only the count's own sampling noise (the rate is already an estimate) is taken out of the
    prediction. Without, a plain Poisson process (the ground truth's traffic)."""
    if rate <= 0:
        return []
    if not expected:
        out: list[float] = []
        t = rng.expovariate(rate)
        while t < end:
            out.append(t)
            t += rng.expovariate(rate)
        return out
    mean = rate * end
    n = int(mean) + (1 if rng.random() < mean - int(mean) else 0)
    return sorted(rng.uniform(0.0, end) for _ in range(n))


def queued_ages(state: State) -> list[float]:
    """The ages of the inherited queue, head first: as reported, the rest (or all, when the
    gateway reported none) spread evenly from the last known age down to 0."""
    n = state.queued
    listed = list(state.queued_ages_s[:n])
    rest = n - len(listed)
    top = listed[-1] if listed else state.oldest_wait_s
    return listed + [top * (rest - i) / (rest + (1 if listed else 0)) for i in range(rest)]
