"""The live collector with its past in front: the console starts with the last hour.

At the first poll `PastSource` asks its injected `fetch` (the gateway's history, Prometheus'
query_range) for the past and waits for it at most `wait_s`; the past's polls go through a fresh
pipeline (`core.pipeline.past`, in slices so keys never wait), then the live polls already seen,
and that pipeline replaces the collector's: windows, hysteresis and the charts start full, and a
late past fills in when it comes. The app takes what is new with `take()`. Every failure is the
header's one line and the log's, never a traceback; a past never counts as a live poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, overload

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.past import PastFold, onto_live
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings
from llmtop.tui.view.past import PastState
from llmtop.tui.view.present import LogEvent

if TYPE_CHECKING:
    from llmtop.recording.reader import Recording
    from llmtop.recording.replay import ReplaySource

PastFetch = Callable[[float], Awaitable["Recording"]]
"""Read the last so many seconds of the past (`sources.history.gateway_history`,
`sources.prometheus_history`), bound."""

Stop = Callable[[], bool]
"""Whether a thread's work is to stop (the app's worker was cancelled: the app quits)."""

WAIT_S = 2.0
"""The most the first frame waits for the past; a later past fills in when it comes."""
TIMEOUT_S = 30.0
"""The most the past is waited for at all."""
FIRST_S = 660.0
"""The recent past the first frame waits for: the charts' 10 minutes and the onset of an incident
10 minutes old. An hour folds in seconds of CPU (1-2 ms a poll, most of it the rules' look-backs:
BENCHMARKS.md), so the older part is read and folded after the first frame."""
SLICE_S = 0.02
"""Seconds of folding, then as long a pause, once the first poll waits no more: the screen (its
first frame, keys) gets half of the loop, and a busy screen does not starve the fold."""
FIRST_SLICE_S = 0.25
"""Seconds of folding between two turns of the loop while the first poll waits for it."""


class _Collector(Protocol):
    pipeline: Pipeline
    last_raw: RawPoll | None

    async def poll(self) -> Snapshot: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class PastUpdate:
    """What the app shows once the past is in: its snapshots (the charts), the live ones
    recomputed after it, and the state (the header)."""

    state: PastState
    snapshots: tuple[Snapshot, ...] = ()
    live: tuple[Snapshot, ...] = ()
    lines: tuple[LogEvent, ...] = ()
    """Lines for the log that are not snapshots' diffs: the failure or the warnings."""
    who: Mapping[float, tuple[str, ...]] = field(default_factory=dict)
    """Poll time -> who changed a limit then (`PastFold.who`)."""
    unseen: Mapping[float, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    """Poll time -> changes its snapshot cannot show (`PastFold.unseen`: Prometheus')."""


def fresh_pipeline(p: Pipeline) -> Pipeline:
    """A new pipeline with `p`'s settings (and a fleet's names)."""
    if type(p) is Pipeline:  # one engine: its console imports no fleet
        return Pipeline(p.settings, max_num_seqs=p.max_num_seqs)
    from llmtop.core.pipeline.fleet import FleetPipeline

    if isinstance(p, FleetPipeline):
        fleet = FleetPipeline(p.settings, max_num_seqs=p.max_num_seqs)
        fleet.names = dict(p.names)
        return fleet
    return Pipeline(p.settings, max_num_seqs=p.max_num_seqs)


class _Decoded(Sequence[RawPoll]):
    """A recording's polls decoded as they are read (an hour decoded at once would hold the
    loop ~1 s), each named as the console names its engine (`onto_live`)."""

    def __init__(self, recording: Recording, live_urls: Sequence[str]) -> None:
        self.recording = recording
        self.live_urls = live_urls

    def __len__(self) -> int:
        return len(self.recording)

    @overload
    def __getitem__(self, i: int) -> RawPoll: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[RawPoll]: ...

    def __getitem__(self, i: int | slice) -> RawPoll | Sequence[RawPoll]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return onto_live((self.recording.raw(i),), self.live_urls)[0]


def polls_of(
    past: Sequence[RawPoll],
    live: Sequence[RawPoll],
    asked_s: float,
    stop: Stop = lambda: False,
) -> list[RawPoll]:
    """The past before the first live poll, then the live polls, of the last `asked_s`
    ([] once `stop()` is true)."""
    first_live = live[0].time if live else float("inf")
    polls: list[RawPoll] = []
    for p in past:
        if stop():
            return []
        if p.time < first_live:
            polls.append(p)
    polls += live
    if not polls:
        return []
    since = polls[-1].time - max(asked_s, 0.0)
    return [p for p in polls if p.time >= since]


def replay_of(
    past: Sequence[RawPoll],
    live: Sequence[RawPoll],
    asked_s: float,
    name: str,
    health: HealthSettings,
    stop: Stop,
) -> ReplaySource | None:
    """`polls_of` as an in-memory recording's replay, paused at its end with every snapshot
    computed, so it opens on its last moment at once (a thread's work: `PastSource.replay`).
    None: fewer than 2 polls, or `stop()` came true (it is asked every few polls)."""
    from llmtop.core.pipeline.past import recording_of
    from llmtop.core.record.encode import header
    from llmtop.recording.replay import ReplaySource

    polls = polls_of(past, live, asked_s, stop)
    if len(polls) < 2 or stop():
        return None
    targets: dict[str, object] = {"vllm": [], "prometheus": None, "gateway": None}
    recording = recording_of(polls, name, header(1.0, targets, polls[0].time))
    replay = ReplaySource(recording, health, paused=True)
    for i in range(0, len(recording), 20):
        if stop():
            return None
        replay.snapshot(i)
    replay.snapshot(len(recording) - 1)
    replay.seek_end()
    return replay


class PastSource:
    """A SnapshotSource: `collector`'s polls, its pipeline first fed the past `fetch` reads."""

    def __init__(
        self,
        collector: _Collector,
        fetch: PastFetch | None,
        *,
        source: str | None,
        asked_s: float,
        live_urls: Sequence[str] = (),
        wait_s: float = WAIT_S,
        timeout_s: float = TIMEOUT_S,
        error: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.collector = collector
        self.last_raw: RawPoll | None = None
        """The last live poll's raw inputs (the recorder writes them)."""
        self._fetch = fetch
        self.live_urls = tuple(live_urls)
        self.wait_s = wait_s
        self.timeout_s = timeout_s
        self._clock = clock
        self.state = PastState(source, asked_s, loading=fetch is not None, error=error)
        self._live: deque[RawPoll] = deque(maxlen=max(60, int(asked_s) + 60))
        """The live polls since the start (an hour's worth at most): a late past refolds them,
        the replay key shows them after the past."""
        self._past: Sequence[RawPoll] = ()
        self._task: asyncio.Task[None] | None = None
        self._first_in = asyncio.Event()
        """Set once the recent past is in (or failed): what the first poll waits for."""
        self._waited = False
        """The first poll waits no more: the fold leaves the screen half of the loop."""
        self.in_time: bool | None = None
        """Whether the past was in (or had failed) before the first live poll: the first
        frame shows it; None before that poll."""
        self._update: PastUpdate | None = None
        if fetch is None:
            self._update = PastUpdate(self.state, lines=self._failure_lines())

    def __getattr__(self, name: str) -> object:
        """Everything else of the collector (a fleet's `fleet`, say) as is."""
        return getattr(self.__dict__["collector"], name)

    async def poll(self) -> Snapshot:
        """The first poll starts reading the past and waits for it up to `wait_s`."""
        if self._task is None and self._fetch is not None:
            self._task = asyncio.ensure_future(self._load(self._fetch))
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._first_in.wait(), self.wait_s)
            self.in_time = self._first_in.is_set()
            self._waited = True
        snap = await self.collector.poll()
        self.last_raw = self.collector.last_raw
        if self.last_raw is not None:
            self._live.append(self.last_raw)
        return snap

    def take(self) -> PastUpdate | None:
        """What is new of the past since the last call (None: nothing)."""
        update, self._update = self._update, None
        return update

    def polls(self) -> list[RawPoll]:
        """The past and the live polls since, of the last `asked_s` (decodes them all)."""
        return polls_of(self._past, tuple(self._live), self.state.asked_s)

    @property
    def held(self) -> int:
        """How many polls the replay key could show at most (the past's and the live ones)."""
        return len(self._past) + len(self._live)

    def replay_maker(self, health: HealthSettings) -> Callable[[Stop], ReplaySource | None]:
        """What makes the replay key's replay (`replay_of`), holding what it reads as it is now
        (the live polls go on arriving): an hour is seconds of decoding, encoding and folding,
        so the app calls it on a thread, with what says to stop."""
        name = f"{self.state.source} history"
        return partial(replay_of, self._past, tuple(self._live), self.state.asked_s, name, health)

    async def _load(self, fetch: PastFetch) -> None:
        """The last `FIRST_S` first (what the first frame waits for), then, when there may be
        more, the whole span asked (the log's older lines), each folded in as it comes."""
        try:
            first_s = min(self.state.asked_s, FIRST_S)
            recent = await self._read(fetch, first_s)
            if recent is None or not await self._fold_in(recent, more=True):
                return
            if self.state.asked_s <= first_s or (self.state.covered_s or 0.0) < first_s * 0.9:
                self._done()  # the history holds no more than that
                return
            whole = await self._read(fetch, self.state.asked_s, first=False)
            if whole is not None:
                await self._fold_in(whole, more=False)
            self._done()
        finally:
            self._first_in.set()

    async def _read(
        self, fetch: PastFetch, since_s: float, *, first: bool = True
    ) -> Recording | None:
        """`fetch(since_s)` bounded; None (and the failure said) when it fails."""
        try:
            return await asyncio.wait_for(fetch(since_s), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except (asyncio.TimeoutError, TimeoutError):
            why = f"no answer within {self.timeout_s:g} s"
        except Exception as e:  # a source's LlmtopError is one line; anything else too
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if first:
            self._failed(why)
        else:  # the recent past is in: keep it, say what is missing
            self._say(f"past: the older part did not come ({why})")
        return None

    async def _fold_in(self, recording: Recording, *, more: bool) -> bool:
        """Fold `recording` and the live polls seen into a fresh pipeline that replaces the
        collector's; the app's update. False when it holds no poll before now."""
        past = _Decoded(recording, self.live_urls)
        fold = PastFold(fresh_pipeline(self.collector.pipeline), past, live=self._live)
        while not self._slice(fold, SLICE_S if self._waited else FIRST_SLICE_S):  # noqa: ASYNC110
            await asyncio.sleep(SLICE_S if self._waited else 0)  # the screen's turn, not a wait
        self.collector.pipeline = fold.pipeline  # no await since the last slice: no poll lost
        self._past = past
        if not fold.snapshots:  # history on, but nothing in it yet (a gateway just started)
            self.state = replace(self.state, loading=False, covered_s=0.0)
            line = LogEvent(self._clock(), "info", f"past: {self.state.source} holds no poll yet")
            self._update = PastUpdate(self.state, lines=(line,))
            return False
        covered = fold.snapshots[-1].time - fold.snapshots[0].time
        # how much a source holds is the header's `12m of 1h`, not a fault ("(partial)")
        warnings = tuple(w for w in recording.warnings if ": it holds " not in w)
        if fold.skipped:
            warnings += (f"{fold.skipped} polls of the past out of time order or after now",)
        self.state = replace(self.state, loading=more, covered_s=covered, warnings=warnings)
        self._first_in.set()
        self._update = PastUpdate(
            self.state,
            tuple(fold.snapshots),
            tuple(fold.live_snapshots),
            tuple(LogEvent(self._clock(), "error", f"past: {w}") for w in warnings),
            fold.who,
            fold.unseen,
        )
        return True

    @staticmethod
    def _slice(fold: PastFold, seconds: float) -> bool:
        """Fold for about `seconds`; True once all is folded."""
        end = time.perf_counter() + seconds
        while not fold.run(10):
            if time.perf_counter() >= end:
                return False
        return True

    def _done(self) -> None:
        """Nothing more is coming: the header stops saying loading."""
        if self.state.loading:
            self.state = replace(self.state, loading=False)
            if self._update is not None:
                self._update = replace(self._update, state=self.state)
            else:
                self._update = PastUpdate(self.state)

    def _say(self, text: str) -> None:
        line = LogEvent(self._clock(), "error", text)
        if self._update is not None:
            self._update = replace(self._update, lines=(*self._update.lines, line))
        else:
            self._update = PastUpdate(self.state, lines=(line,))

    def _failed(self, error: str) -> None:
        self.state = replace(self.state, loading=False, error=error)
        self._update = PastUpdate(self.state, lines=self._failure_lines())

    def _failure_lines(self) -> tuple[LogEvent, ...]:
        from llmtop.tui.view.past import past_label

        if self.state.error is None or self.state.asked_s <= 0:
            return ()
        return (LogEvent(self._clock(), "error", past_label(self.state)),)

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.collector.aclose()
