"""The drivers of a load run: who decides when the `Runner` sends its next request. `ClosedLoop`
keeps N in flight, each worker back to back, N resizable (the demo); `OpenLoop` offers at a rate
with gamma-distributed gaps however many are in flight (`--rate`); `stop_after` ends a run at its
duration. Each stops by itself when the runner's budget is spent or it is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from llmtop.load.runner import Runner, Shape
from llmtop.load.stats import RequestResult, interarrivals


class ClosedLoop:
    """Keep `concurrency` requests in flight, each worker sending back to back; resizable."""

    def __init__(self, runner: Runner, shape: Shape, concurrency: int = 0) -> None:
        self.runner = runner
        self.shape = shape
        self.target = 0
        self._workers: dict[int, asyncio.Task[None]] = {}
        self.set_concurrency(concurrency)

    def set_concurrency(self, n: int) -> None:
        """Grow now; shrink as workers finish their current request."""
        self.target = max(0, n)
        for i in range(self.target):
            task = self._workers.get(i)
            if task is None or task.done():
                self._workers[i] = asyncio.ensure_future(self._worker(i))

    async def _worker(self, i: int) -> None:
        while i < self.target and self.runner.admit():
            await self.runner.one(self.shape)

    async def wait(self) -> None:
        """Until every worker has stopped (budget spent, stopped, or concurrency 0)."""
        while True:
            live = [t for t in self._workers.values() if not t.done()]
            if not live:
                return
            await asyncio.gather(*live)

    async def aclose(self) -> None:
        for t in self._workers.values():
            t.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)


class OpenLoop:
    """Offer requests at a rate with gamma-distributed gaps, however many are in flight."""

    def __init__(
        self, runner: Runner, shape: Shape, rate_per_s: float, burstiness: float, seed: int = 0
    ) -> None:
        self.runner = runner
        self.shape = shape
        self._gaps = iter(
            interarrivals(runner.max_requests, rate_per_s, burstiness, random.Random(seed))
        )
        self._tasks: set[asyncio.Task[RequestResult]] = set()

    async def run(self) -> None:
        """Offer until the budget is spent or the run stops, then wait for the stragglers."""
        for gap in self._gaps:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.runner.stopped.wait(), gap)
            if not self.runner.admit():
                break
            task = asyncio.ensure_future(self.runner.one(self.shape))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._tasks:
            await asyncio.gather(*list(self._tasks))


async def stop_after(runner: Runner, duration_s: float) -> None:
    """Stop the run once `duration_s` has passed since it started."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(runner.stopped.wait(), max(0.0, duration_s - runner.elapsed()))
    runner.stop()
