"""Findings worded when first read (`WordedOnRead`): the same object as one built with its
words once read, and the words of its own poll however late they are read."""

from __future__ import annotations

import copy
import gc
import pickle
from dataclasses import replace

import pytest

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import DerivedReplica, EngineStats, Finding
from llmtop.core.health.kvsize import KvHeld, KvSize
from llmtop.core.health.rulebase import Verdict
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.settings import HealthSettings

CALLS: list[tuple[str, str]] = []


def counted(summary: str, action: str) -> tuple[str, str]:
    """A wording that counts its calls."""
    CALLS.append((summary, action))
    return summary, action


WORDS = ("KV full", "cap at ~3")


def test_a_later_finding_is_worded_once_at_its_first_read_and_is_then_the_eager_one() -> None:
    CALLS.clear()
    lazy = Finding.later("kv-exhausted", "critical", "kv", counted, WORDS, since=3.0)
    eager = Finding("kv-exhausted", "critical", "kv", "KV full", "cap at ~3", since=3.0)
    assert CALLS == []
    assert lazy.pending_words() == (counted, WORDS)
    assert (lazy.id, lazy.severity, lazy.since) == ("kv-exhausted", "critical", 3.0)
    assert CALLS == []  # the other fields are there without wording
    assert lazy.action == "cap at ~3"
    assert lazy.summary == "KV full"
    assert len(CALLS) == 1  # both words from one call
    assert lazy.pending_words() is None
    assert lazy == eager
    assert hash(lazy) == hash(eager)
    assert repr(lazy) == repr(eager)
    assert replace(lazy, since=5.0) == replace(eager, since=5.0)
    assert len(CALLS) == 1
    with pytest.raises(AttributeError):
        _ = lazy.no_such_field  # type: ignore[attr-defined]
    assert eager.pending_words() is None


def test_equality_hash_replace_pickle_and_copy_word_an_unread_one() -> None:
    eager = Finding("kv-exhausted", "critical", "kv", "KV full", "cap at ~3")

    def fresh() -> Finding:
        return Finding.later("kv-exhausted", "critical", "kv", counted, WORDS)

    assert fresh() == eager
    assert hash(fresh()) == hash(eager)
    assert replace(fresh(), summary="on 3 replicas; KV full") == replace(
        eager, summary="on 3 replicas; KV full"
    )
    back = pickle.loads(pickle.dumps(fresh()))
    assert back == eager
    assert back.pending_words() is None
    assert copy.deepcopy(fresh()) == eager
    assert copy.copy(fresh()) == eager


def test_a_later_verdict_is_handed_on_to_its_finding_unworded() -> None:
    CALLS.clear()
    verdict = Verdict.later(counted, WORDS, severity="warning")
    assert verdict.severity == "warning"
    assert verdict.bottleneck is None
    assert verdict.pending_words() == (counted, WORDS)
    assert verdict.summary == "KV full"
    assert len(CALLS) == 1


def _full(running: float, usage: float) -> EngineStats:
    """A replica whose cache is full with requests waiting: kv-exhausted holds, sized by
    what its running sequences held (which moves with `running` and `usage`)."""
    return EngineStats(
        url="r1",
        up=True,
        running=running,
        waiting=40.0,
        kv_cache_usage_frac=usage,
        kv_capacity_tokens=4096,
        kv_block_size=16,
        decode_tok_per_s=100.0,
        preemptions_per_s=0.5,
        mean_prompt_tokens=100.0,
        mean_generation_tokens=50.0,
    )


def _polls() -> list[EngineStats]:
    return [_full(running=float(4 + (t % 5)), usage=0.92 + 0.01 * (t % 7)) for t in range(40)]


def test_words_read_polls_later_are_the_words_of_their_own_poll() -> None:
    """One pipeline reads each kv-exhausted finding at its poll; another reads none until the
    history (and its look-back indexes) has moved on 40 polls: the same words, poll by poll.
    The sizing's look-back names a poll seconds ago, so reading it late would show."""
    settings = HealthSettings(fire_after_s=0.0)
    now, late = FleetPipeline(settings), FleetPipeline(settings)
    read_now: list[tuple[str, str]] = []
    unread: list[Finding] = []
    for t, stats in enumerate(_polls()):
        replica = [DerivedReplica("r1", "r1", stats)]
        snap_now = now.update(RawPoll(time=float(t)), replica)
        snap_late = late.update(RawPoll(time=float(t)), replica)
        assert now.fleet is not None
        assert late.fleet is not None
        (f,) = [f for f in now.fleet.replicas[0].findings if f.id == "kv-exhausted"]
        (grouped,) = [f for f in snap_now.findings if f.id == "kv-exhausted"]
        read_now += [(f.summary, f.action), (grouped.summary, grouped.action)]
        assert grouped.summary == "r1: " + f.summary  # the fleet's, naming its replica
        (g,) = [g for g in late.fleet.replicas[0].findings if g.id == "kv-exhausted"]
        (g_grouped,) = [f for f in snap_late.findings if f.id == "kv-exhausted"]
        assert g.pending_words() is not None  # the pipeline handed both on unworded
        assert g_grouped.pending_words() is not None
        unread += [g, g_grouped]
    assert len({s for s, _ in read_now}) > 5  # the words do move from poll to poll
    assert any("s ago" in s for s, _ in read_now)  # sized by a look-back
    gc.collect()
    kept = [g.pending_words() for g in unread[::2]]  # the replica's own, still unworded
    assert all(k is not None and not gc.is_tracked(k[1]) for k in kept)  # flat, plain numbers
    assert [(g.summary, g.action) for g in unread[::-1]] == read_now[::-1]  # newest first


def test_a_kv_size_kept_as_plain_numbers_is_the_same_size() -> None:
    held = KvHeld(usage_frac=0.93, running=5.0, tokens=761.9, ago_s=12.0)
    for size in (
        KvSize(4096, 16, 100.0, 50.0, held, 762, 4, 0.9),
        KvSize(4096, None, None, None, None, 1000, 3, 0.8),
    ):
        inputs = size.inputs()
        assert all(not isinstance(x, tuple | KvHeld) for x in inputs)  # flat
        assert KvSize.of_inputs(inputs) == size
        assert KvSize.of_inputs(inputs).arithmetic() == size.arithmetic()
