"""`PastSource`: the live collector with the past in front, on a fake collector that plays the
demo story's polls and a fake fetch (no sockets, no screen): the first poll waits for the past
a bounded time, a late past refolds the live polls seen, a failing one is one line."""

from __future__ import annotations

import asyncio
import functools

import pytest

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.past import recording_of
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.errors import GatewayReadError
from llmtop.recording.reader import Recording
from llmtop.settings import HealthSettings
from llmtop.tui import past as past_module
from llmtop.tui.past import PastFetch, PastSource, PastUpdate
from llmtop.tui.view.past import past_label
from tests.support import story

OPENED = 200
URL = "http://127.0.0.1:8000"


@functools.cache
def polls() -> tuple[RawPoll, ...]:
    return tuple(story.recording())


@functools.cache
def watched() -> tuple[Snapshot, ...]:
    p = Pipeline(HealthSettings())
    return tuple(p.update(r) for r in polls())


class FakeCollector:
    """Plays the story from poll `OPENED` on, through its own pipeline, as Collector.poll."""

    def __init__(self) -> None:
        self.pipeline = Pipeline(HealthSettings())
        self.last_raw: RawPoll | None = None
        self.next = OPENED
        self.closed = False

    async def poll(self) -> Snapshot:
        raw = polls()[self.next]
        self.next += 1
        self.last_raw = raw
        return self.pipeline.update(raw)

    async def aclose(self) -> None:
        self.closed = True


def history(delay_s: float = 0.0) -> tuple[asyncio.Event, PastFetch]:
    """A fetch of the story's polls before `OPENED` that answers after `delay_s`, or when the
    returned event is set."""
    answered = asyncio.Event()

    async def fetch(since_s: float) -> Recording:
        if delay_s:
            await asyncio.sleep(delay_s)
        else:
            await answered.wait()
        return recording_of(polls()[:OPENED], "gateway history", story.recording().header)

    return answered, fetch


async def taken(src: PastSource, timeout_s: float = 10.0) -> PastUpdate | None:
    """The source's next update, once the past is in (the fold takes turns with the loop)."""
    for _ in range(int(timeout_s / 0.01)):
        if not src.state.loading:
            break
        await asyncio.sleep(0.01)
    return src.take()


async def test_the_first_poll_starts_with_the_past() -> None:
    _, fetch = history(delay_s=0.01)
    src = PastSource(FakeCollector(), fetch, source="gateway", asked_s=3600.0)
    assert past_label(src.state) == "past: gateway 1h loading…"
    first = await src.poll()
    assert first == watched()[OPENED]  # windows and findings as if watching since the start
    update = src.take()
    assert update is not None
    assert update.snapshots == watched()[:OPENED]
    assert past_label(update.state) == "past: gateway 3m19s of 1h"
    assert src.take() is None
    assert len(src.polls()) == OPENED + 1  # the replay key's: the past and the live poll


async def test_a_late_past_fills_in_and_the_live_polls_are_refolded() -> None:
    answered, fetch = history()
    src = PastSource(FakeCollector(), fetch, source="gateway", asked_s=3600.0, wait_s=0.01)
    cold = [await src.poll() for _ in range(3)]  # the first frame did not wait longer
    assert not cold[0].findings
    assert src.take() is None
    answered.set()
    update = await taken(src)
    assert update is not None
    assert update.live == watched()[OPENED : OPENED + 3]
    assert await src.poll() == watched()[OPENED + 3]  # the collector's pipeline is the new one
    await src.aclose()


async def test_a_past_that_fails_is_one_line_and_live_goes_on() -> None:
    async def refused(since_s: float) -> Recording:
        raise GatewayReadError("gateway http://x keeps no history now (503: --no-history)")

    src = PastSource(FakeCollector(), refused, source="gateway", asked_s=3600.0)
    snap = await src.poll()
    assert not snap.findings  # live, cold: nothing pretends to know the past
    update = src.take()
    assert update is not None
    assert not update.snapshots
    (line,) = update.lines
    off = "past: none — gateway history off: "
    assert line.text == off + "gateway http://x keeps no history now (503: --no-history)"


async def test_a_past_that_never_answers_is_given_up() -> None:
    _, fetch = history()  # never set
    src = PastSource(
        FakeCollector(), fetch, source="prometheus", asked_s=600.0, wait_s=0.01, timeout_s=0.05
    )
    await src.poll()
    await asyncio.sleep(0.1)
    update = src.take()
    assert update is not None
    assert (
        past_label(update.state) == "past: none — prometheus history off: no answer within 0.05 s"
    )


async def test_no_source_says_so_at_once() -> None:
    src = PastSource(
        FakeCollector(),
        None,
        source=None,
        asked_s=3600.0,
        error="no gateway or --prometheus to read it from",
    )
    update = src.take()
    assert update is not None
    assert update.lines[0].text == "past: none — no gateway or --prometheus to read it from"
    await src.poll()
    assert len(src.polls()) == 1


async def test_a_history_with_nothing_yet_says_so() -> None:
    async def empty(since_s: float) -> Recording:
        return recording_of([], "gateway history", story.recording().header)

    src = PastSource(FakeCollector(), empty, source="gateway", asked_s=3600.0)
    assert await src.poll() == Pipeline(HealthSettings()).update(polls()[OPENED])
    update = src.take()
    assert update is not None
    assert past_label(update.state) == "past: gateway 1h, nothing in it yet"
    assert [e.text for e in update.lines] == ["past: gateway holds no poll yet"]


async def test_the_recent_past_first_then_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first frame waits for the last `FIRST_S` only; the older part follows and refolds."""
    monkeypatch.setattr(past_module, "FIRST_S", 60.0)
    asked: list[float] = []

    async def fetch(since_s: float) -> Recording:
        asked.append(since_s)
        end = polls()[OPENED - 1].time
        kept = [p for p in polls()[:OPENED] if p.time >= end - since_s]
        return recording_of(kept, "gateway history", story.recording().header)

    src = PastSource(FakeCollector(), fetch, source="gateway", asked_s=3600.0)
    await src.poll()
    first = src.take()
    assert first is not None
    assert len(first.snapshots) in (60, 61)
    assert past_label(first.state) == "past: gateway 59s of 1h, loading…"
    rest = await taken(src)
    assert rest is not None
    assert asked == [60.0, 3600.0]
    assert rest.snapshots == watched()[:OPENED]
    assert past_label(rest.state) == "past: gateway 3m19s of 1h"
    assert await src.poll() == watched()[OPENED + 1]  # the whole past's pipeline, live on
