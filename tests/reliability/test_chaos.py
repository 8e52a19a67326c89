"""The chaos run in the suite (bench/chaos.py, its 90-second version): two sims, two gateways
sharing limits through a real Redis, the TUI recording in tmux, an open-loop client at 1.5x
capacity, and one round of every fault. Every request ends in exactly one outcome and the
gateways' counts agree request for request; docs/reliability.md says what is promised.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.chaos import chaos
from harness.chaos_ledger import FAULT_KINDS, NAMED_BY, WITHIN_S
from harness.redis_server import redis_binary
from harness.system_tools import system_binary

pytestmark = pytest.mark.xdist_group("chaos")  # its own worker: beside, not behind, the rest


@pytest.mark.slow(100)
def test_one_round_of_every_fault_loses_no_request(tmp_path: Path) -> None:
    redis_binary()  # skips naming the reason when there is none
    system_binary("tmux")
    run = chaos(66.0, tmp_path)
    assert run.problems == [], run.problems
    outcomes = run.outcomes()
    assert outcomes["lost"] == 0
    assert sum(outcomes.values()) == len(run.entries)
    # each kind of outcome happened: the run tested them, not just the happy path
    for kind in ("served", "rejected", "error", "cancelled"):
        assert outcomes[kind] > 0, outcomes
    assert sorted(i.kind for i, _, _ in run.injections) == sorted(FAULT_KINDS)
    assert run.rate_per_s == pytest.approx(1.5 * run.capacity_per_s)
    # the report names each fault within 5 s of its start, replica-slow within 8 s
    # (docs/reliability.md says by what, and why that one takes longer)
    for n in run.figures["named"]:
        assert n["finding"] in NAMED_BY[n["kind"]], n
        assert n["delay_s"] <= WITHIN_S.get(n["kind"], 5.0), n
    assert run.figures["report_polls"] >= 50
