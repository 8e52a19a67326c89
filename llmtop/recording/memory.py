"""A recording made in memory from RawPolls (a history read from Prometheus, the console's past
and what it saw since): the same `Recording` a file gives, so replay and report read it unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llmtop.core.base.raw import RawPoll
from llmtop.recording.reader import Recording
from llmtop.recording.writer import Encoder


def recording_of(
    polls: Sequence[RawPoll], path: str, head: dict[str, Any], warnings: Sequence[str] = ()
) -> Recording:
    """RawPolls as a Recording; each line a keyframe, so a seek decodes one line (polls are
    expected in time order, as a recording keeps them)."""
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
