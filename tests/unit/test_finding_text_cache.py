"""The finding text kept between polls (`KvSize.budget`'s, cached by capacity and target) is
the text of this poll's inputs: it changes the poll they change, on a fake clock."""

from __future__ import annotations

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import DerivedReplica, EngineStats
from llmtop.core.health.kvsize import KvSize
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.settings import HealthSettings


def _size(capacity: float, target: float) -> KvSize:
    return KvSize(int(capacity), 16, 900.0, 100.0, None, 1000, 3, target)


def test_budget_text_follows_capacity_and_target() -> None:
    """Back and forth between two caches and two targets: each text is its own inputs'."""
    for _ in range(2):
        assert _size(4096, 0.9).budget() == "3,686 KV tokens (90% target of 4,096)"
        assert _size(8192, 0.9).budget() == "7,372 KV tokens (90% target of 8,192)"
        assert _size(4096, 0.8).budget() == "3,276 KV tokens (80% target of 4,096)"


def test_signed_zero_capacity_is_not_taken_for_zero() -> None:
    """0.0 and -0.0 are one key of a dict but print differently: neither is cached."""
    zero = KvSize(0.0, None, None, None, None, 1, 1, 0.9)  # type: ignore[arg-type]
    negative_zero = KvSize(-0.0, None, None, None, None, 1, 1, 0.9)  # type: ignore[arg-type]
    assert zero.budget() == "0 KV tokens (90% target of 0)"
    assert negative_zero.budget() == "0 KV tokens (90% target of -0)"
    assert zero.budget() == "0 KV tokens (90% target of 0)"


def _full(blocks: int) -> EngineStats:
    """A replica whose cache is full with requests waiting: kv-exhausted holds."""
    return EngineStats(
        url="r1",
        up=True,
        running=4.0,
        waiting=40.0,
        kv_cache_usage_frac=1.0,
        kv_capacity_tokens=blocks * 16,
        kv_block_size=16,
        decode_tok_per_s=100.0,
        preemptions_per_s=0.5,
        mean_prompt_tokens=400.0,
        mean_generation_tokens=600.0,
    )


def test_a_firing_finding_states_the_new_cache_the_poll_it_changes() -> None:
    """kv-exhausted fires, then the replica comes back with a larger cache (a restart with
    more GPU memory): its finding's text names the new capacity from that poll on, and the
    old one again when it goes back."""
    pipe = FleetPipeline(HealthSettings(fire_after_s=2.0, clear_after_s=10.0))
    texts: list[str | None] = []
    for t in range(12):
        blocks = 256 if t < 5 or t >= 9 else 512
        pipe.update(RawPoll(time=float(t)), [DerivedReplica("r1", "r1", _full(blocks))])
        assert pipe.fleet is not None
        found = [f for f in pipe.fleet.replicas[0].findings if f.id == "kv-exhausted"]
        texts.append(found[0].summary if found else None)
    assert texts[:2] == [None, None]  # pending: fire_after_s
    assert all("(90% target of 4,096)" in s for s in texts[2:5] if s)
    assert all("(90% target of 8,192)" in s for s in texts[5:9] if s)
    assert all("(90% target of 4,096)" in s for s in texts[9:] if s)
    assert all(texts[2:])
