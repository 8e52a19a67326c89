"""The what-if's pure choices (llmtop.tui.view.caps): the caps it predicts and the cap a
command line being typed asks about, on the recorded demo story."""

from __future__ import annotations

from dataclasses import replace

from llmtop.core.derive.aggregate import combine
from llmtop.core.health.kvsize import kv_fit
from llmtop.core.health.rulebase import suggested_cap
from llmtop.tui.view.caps import candidate_caps, typed_cap
from tests.support import story


def test_typed_cap_is_a_whole_cap_command_only() -> None:
    assert typed_cap("cap 8") == 8
    assert typed_cap("  cap 12 ") == 12
    for text in ("", "   ", "cap", "cap x", "queue 8", "pause", "rpm off"):
        assert typed_cap(text) is None, text


def test_candidates_follow_the_findings_suggestion_and_leave_the_current_cap_out() -> None:
    history = story.upto(story.MOMENTS["kv-exhausted"])
    snap = history[-1]
    advice = suggested_cap(snap.findings)
    assert advice is not None
    assert snap.gateway is not None
    caps = candidate_caps(snap, history, 0.9)
    assert advice[0] in caps
    assert snap.gateway.max_concurrency not in caps
    assert list(caps) == sorted(caps)
    assert 1 <= len(caps) <= 4


def test_candidates_without_a_suggestion_come_from_the_kv_fit_or_the_current_cap() -> None:
    history = story.upto(story.MOMENTS["healthy"])
    calm = replace(history[-1], findings=())
    assert suggested_cap(calm.findings) is None
    engine = combine(calm.engines)
    assert engine is not None
    assert calm.gateway is not None
    fit = kv_fit(engine, tuple(history), calm.time, 0.9)
    assert fit is not None
    caps = candidate_caps(calm, history, 0.9)
    assert fit in caps or fit == calm.gateway.max_concurrency
    assert candidate_caps(None, (), 0.9) == (4, 8, 16)  # nothing known: around the default 8
