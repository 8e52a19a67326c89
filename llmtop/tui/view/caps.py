"""Which caps the what-if predicts, and which cap a command line being typed asks about."""

from __future__ import annotations

from collections.abc import Sequence

from llmtop.core.base.snapshot import Snapshot
from llmtop.core.derive.aggregate import combine
from llmtop.core.health.kvsize import kv_fit
from llmtop.core.health.rulebase import suggested_cap
from llmtop.errors import LlmtopError
from llmtop.tui.view import commands


def candidate_caps(
    snap: Snapshot | None, history: Sequence[Snapshot], kv_target_frac: float
) -> tuple[int, ...]:
    """Caps around the findings' suggestion (else the KV fit the rules compute) and the
    current cap."""
    from llmtop.whatif.model.render import caps_around  # the what-if loads when first used

    current = snap.gateway.max_concurrency if snap and snap.gateway else None
    if snap is None:
        return caps_around(current, None)
    advice = suggested_cap(snap.findings)
    if advice is not None:
        return caps_around(current, advice[0])
    engine = combine(snap.engines)
    if engine is None:
        return caps_around(current, None)
    return caps_around(current, kv_fit(engine, tuple(history), snap.time, kv_target_frac))


def typed_cap(text: str) -> int | None:
    """The cap `text` (the command line's content) sets, if it is a whole `cap N` command."""
    try:
        parsed = commands.parse_command(text) if text.strip() else None
    except LlmtopError:
        return None
    if not isinstance(parsed, dict):
        return None
    cap = parsed.get("max_concurrency")
    return cap if isinstance(cap, int) else None
