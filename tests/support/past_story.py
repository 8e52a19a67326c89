"""The demo story (tests/fixtures/demo-story.jsonl.gz, a recorded real run) lengthened in virtual
time so that a console can open 10 minutes after its onset (harness/past_history.py): the
steady minute after the cap is played again and again, counters moved on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from harness import past_history
from llmtop.core.base.raw import RawPoll
from tests.support import story

ONSET = 74
"""The story's poll where the first finding fires (degraded-200: TTFT over the SLO)."""
LOOP = (160, 220)
"""The steady minute after the cap, played again (its polls a..b-1)."""
OPEN_AFTER_ONSET_S = 600.0


@functools.cache
def polls(after_onset_s: float = OPEN_AFTER_ONSET_S + 5.0) -> tuple[RawPoll, ...]:
    """The story's polls, then its steady minute again until `after_onset_s` after the onset."""
    rec = story.recording()
    base = [rec.raw(i) for i in range(LOOP[1] + 1)]
    return past_history.lengthen(base, LOOP, base[ONSET].time + after_onset_s)


def opened_at() -> int:
    """The index of the first live poll: 10 minutes after the onset."""
    t = polls()[ONSET].time + OPEN_AFTER_ONSET_S
    return next(i for i, r in enumerate(polls()) if r.time >= t)


def history_bytes(past: Sequence[RawPoll]) -> bytes:
    """`past` as a gateway's GET /admin/history answers it: a gzip recording."""
    return past_history.history_bytes(past, story.recording().header.get("targets") or {})


openmetrics = past_history.openmetrics
