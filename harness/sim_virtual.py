"""Run workloads through the engine in virtual time: calibration, benchmarks, what-if analysis.

Pure: the engine's clock is the only clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from llmtop.sim.model import Engine, Sequence


@dataclass(frozen=True)
class Burst:
    """`n` identical requests arriving together."""

    n: int
    prompt_tokens: int
    max_tokens: int


def run_burst(engine: Engine, burst: Burst, *, max_at_engine: int | None = None) -> list[Sequence]:
    """Send a burst, optionally holding all but `max_at_engine` outside (a gateway); run to idle.

    A held request enters the engine when one of the admitted ones finishes, so its
    `arrival_s` is the time it reached the engine, not the time it reached the gateway.
    """
    held = deque(range(burst.n))
    limit = burst.n if max_at_engine is None else max_at_engine
    done: list[Sequence] = []
    at_engine = 0
    while held and at_engine < limit:
        held.popleft()
        engine.add_request(burst.prompt_tokens, burst.max_tokens)
        at_engine += 1
    while engine.has_work():
        result = engine.step()
        for seq in result.finished:
            done.append(seq)
            at_engine -= 1
        while held and at_engine < limit:
            held.popleft()
            engine.add_request(burst.prompt_tokens, burst.max_tokens)
            at_engine += 1
    return done


def run_concurrent(
    engine: Engine, streams: int, prompt_tokens: int, max_tokens: int, duration_s: float
) -> int:
    """Keep `streams` requests in flight (a closed loop) for `duration_s`; return steps run."""
    for _ in range(streams):
        engine.add_request(prompt_tokens, max_tokens)
    end = engine.now + duration_s
    steps = 0
    while engine.now < end:
        result = engine.step()
        steps += 1
        for _ in result.finished:
            engine.add_request(prompt_tokens, max_tokens)
    return steps
