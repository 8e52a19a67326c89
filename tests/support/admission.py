"""The admission controller on a fake clock: the clock, a controller with small limits, and the
invariant every admission test ends on (offered = outcomes + still in the gateway)."""

from __future__ import annotations

import asyncio

from llmtop.gateway.admission.controller import AdmissionController, Limits


class FakeClock:
    """Virtual seconds; tests move it by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


def accounted(ctl: AdmissionController) -> None:
    """The invariant every test ends on: offered = outcomes + still in the gateway."""
    assert ctl.offered == sum(ctl.outcomes.values()) + ctl.in_flight + ctl.queued
    assert sum(ctl.queued_by_priority().values()) == ctl.queued
    assert ctl.outcomes["rejected"] == sum(ctl.rejections.values())


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def make(clock: FakeClock, **kw: object) -> AdmissionController:
    base: dict[str, object] = {"max_concurrency": 2, "max_queue": 4, "queue_timeout_s": 10.0}
    base.update(kw)
    return AdmissionController(Limits(**base), clock=clock, wall_clock=lambda: 5.0)  # type: ignore[arg-type]
