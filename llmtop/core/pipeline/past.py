"""The console's past: polls read from a history (the gateway's, Prometheus') pushed through the
live pipeline before its first poll, so its windows, hysteresis and look-backs start full. Pure.

The same RawPolls through the same Pipeline give the same Snapshots as if the console had been
watching (recording and replay rely on it). `PastFold` does it in slices, so the caller (the
TUI's event loop) stays responsive between them; polls out of time order (a clock step) and any
at or after the first live poll are left out and counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llmtop.core.base.admin_api import LIMIT_FIELDS
from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import Snapshot
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.record.decode import Recording
from llmtop.core.record.encode import Encoder


def fold(pipeline: Pipeline, raw: RawPoll) -> Snapshot:
    """One poll through a pipeline as the live collector feeds it (a fleet's Prometheus rows
    as its derived replicas; imported then only: one engine's console starts without them)."""
    if raw.prometheus is not None:
        from llmtop.core.pipeline.fleet import FleetPipeline
        from llmtop.core.promql.promql_answers import prometheus_replicas

        if isinstance(pipeline, FleetPipeline):
            return pipeline.update(raw, prometheus_replicas(raw))
    return pipeline.update(raw)


def onto_live(polls: Iterable[RawPoll], live_urls: Sequence[str]) -> list[RawPoll]:
    """The past's engine named as the console names it: one engine read by the gateway at its
    upstream URL and by the console at its --vllm URL is one engine, one window."""
    if len(live_urls) != 1:
        return list(polls)
    url = live_urls[0]
    out: list[RawPoll] = []
    for raw in polls:
        if len(raw.engines) == 1 and raw.engines[0].url != url:
            raw = replace(raw, engines=(replace(raw.engines[0], url=url),))
        out.append(raw)
    return out


@dataclass
class PastFold:
    """Feeds a fresh pipeline the past, then the live polls already seen, `step` polls a call.

    `snapshots` are the past's (what the charts and the event log show of it), `live` the
    recomputed live ones; `skipped` counts the past's polls left out (out of order, or not
    before the first live poll)."""

    pipeline: Pipeline
    past: Sequence[RawPoll]
    live: Sequence[RawPoll] = ()
    snapshots: list[Snapshot] = field(default_factory=list)
    who: dict[float, tuple[str, ...]] = field(default_factory=dict)
    """Poll time -> who changed a limit then (the gateway's events' `source`; a pause is a line
    of its own), for the log."""
    unseen: dict[float, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    """Poll time -> the limit changes (and pauses) of a poll without the gateway's stats, which
    its snapshot cannot show (Prometheus' range), for the log."""
    live_snapshots: list[Snapshot] = field(default_factory=list)
    skipped: int = 0
    _i: int = 0
    _last: float = -math.inf

    @property
    def done(self) -> bool:
        return self._i >= len(self.past) + len(self.live)

    def run(self, step: int = 10_000_000) -> bool:
        """Fold up to `step` more polls; True once every poll is folded."""
        before = self.live[0].time if self.live else math.inf
        n_past = len(self.past)
        end = min(self._i + max(step, 1), n_past + len(self.live))
        while self._i < end:
            i = self._i
            self._i += 1
            if i < n_past:
                raw = self.past[i]
                if not self._last < raw.time < before:
                    self.skipped += 1
                    continue
                self._last = raw.time
                self.snapshots.append(fold(self.pipeline, raw))
                sources = {
                    str(e["source"])
                    for e in raw.events
                    if e.get("source")
                    and e.get("field") in LIMIT_FIELDS  # a pause is a line of its own
                }
                if sources:
                    self.who[raw.time] = tuple(sorted(sources))
                if raw.gateway is None and raw.events:
                    self.unseen[raw.time] = raw.events
            else:
                self.live_snapshots.append(fold(self.pipeline, self.live[i - n_past]))
        return self.done


def recording_of(
    polls: Sequence[RawPoll], path: str, head: dict[str, Any], warnings: Sequence[str] = ()
) -> Recording:
    """RawPolls (in time order) as an in-memory Recording, for replay and report: a history
    read from Prometheus, the console's past and what it saw since. Each line a keyframe, so
    a seek decodes one line."""
    encoder = Encoder(keyframe_every=1)
    lines = [json.dumps(encoder.encode(p), separators=(",", ":")).encode() for p in polls]
    return Recording(
        path=path,
        header=head,
        lines=lines,
        warnings=list(warnings),
        times=[p.time for p in polls],
        keyframes=list(range(len(lines))),
    )
