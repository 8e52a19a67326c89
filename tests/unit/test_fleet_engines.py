"""A fleet that mixes engines (issue 44.6): the fleet findings compare like with like (one engine
kind and one model), and the replica table says each replica's engine.

Three vLLM replicas, steady at 4 running and none waiting (tests/support/fleet.py), beside the
real llama.cpp at its burst's peak (tests/fixtures/engines/llamacpp/metrics-burst.txt: 2 slots
busy, 26 requests deferred): a llama.cpp's queue behind its 2 slots is no outlier among vLLMs
batching, nor is its load an imbalance of theirs. The same figures from a fourth vLLM are.
"""

from __future__ import annotations

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import Fleet
from llmtop.core.dialects.catalog import sample_names
from llmtop.core.exposition import promtext
from llmtop.core.findings.fleet import alike
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.settings import HealthSettings
from llmtop.tui.view import replicas as rp
from tests.support.fleet import scrape, url
from tests.support.paths import FIXTURES

KEEP = promtext.keep_names(sample_names())
LLAMACPP = (FIXTURES / "engines" / "llamacpp" / "metrics-burst.txt").read_text()
LLAMA_URL = "http://10.0.1.9:8080"
FLEET_IDS = {"replica-outlier", "load-imbalance"}


def engine(u: str, text: str) -> RawEngine:
    return RawEngine(u, promtext.parse(text, KEEP))


def run(fourth: str, vllms: dict[int, dict[str, float]] | None = None, n: int = 3) -> Fleet:
    """n vLLMs (kwargs of `scrape` per index) and a fourth replica's text, polled 8 s."""
    p = FleetPipeline(HealthSettings())
    for t in range(1, 9):
        polls = [engine(url(i), scrape(t, **(vllms or {}).get(i, {}))) for i in range(n)]  # type: ignore[arg-type]
        polls.append(engine(LLAMA_URL, fourth))
        p.update(RawPoll(time=float(t), engines=tuple(polls)))
    assert p.fleet is not None
    return p.fleet


def fleet_findings(fleet: Fleet) -> dict[str, str]:
    return {f.id: f.summary for f in fleet.findings if f.id in FLEET_IDS}


def test_a_llama_cpp_queue_is_no_outlier_among_vllms() -> None:
    fleet = run(LLAMACPP)
    rows = {r.key: r for r in fleet.replicas}
    assert rows[LLAMA_URL].stats.engine == "llamacpp"
    assert rows[LLAMA_URL].stats.waiting == 26  # its deferred requests, its queue
    assert {rows[url(i)].stats.engine for i in range(3)} == {"vllm"}
    assert fleet_findings(fleet) == {}


def test_the_same_figures_from_a_vllm_stand_out() -> None:
    """The control: a vLLM with the llama.cpp's figures is an outlier and an imbalance, so the
    test above holds because of the engines, not the figures."""
    fleet = run(scrape(8, running=2, waiting=26))
    found = fleet_findings(fleet)
    assert found.keys() == FLEET_IDS
    assert found["replica-outlier"].startswith("10.0.1.9:8080 stands out: waiting 26")


def test_a_hot_vllm_beside_a_llama_cpp_is_compared_with_the_vllms_alone() -> None:
    fleet = run(LLAMACPP, {1: {"waiting": 40, "running": 8}}, n=4)
    found = fleet_findings(fleet)
    summary = found["replica-outlier"]
    assert summary.startswith(
        "10.0.0.1:8000 stands out: waiting 40 vs a median of 0 on the other 3"
    )
    assert "(m vLLM)" in summary  # its peers named, in a fleet of several kinds
    assert "10.0.1.9" not in summary


def test_alike_groups_by_engine_and_model_and_keeps_an_alike_fleet_whole() -> None:
    fleet = run(LLAMACPP)
    groups = alike(fleet.replicas)
    assert [len(g) for g in groups] == [1, 3] or [len(g) for g in groups] == [3, 1]
    same = run(scrape(8))
    assert alike(same.replicas) == [same.replicas]  # no copy when all alike


def test_the_replica_table_names_each_engine_in_a_mixed_fleet() -> None:
    fleet = run(LLAMACPP)
    cols = rp.widths(fleet.replicas, 118)
    assert cols[rp.ENGINE] == len("llama.cpp")
    assert "engine" in rp.heading(cols)
    cells = {r.key: rp.row(r).cells[rp.ENGINE] for r in fleet.replicas}
    assert cells[LLAMA_URL] == "llama.cpp"
    assert cells[url(0)] == "vLLM"
    line = rp.cells(rp.row(fleet.replicas[0]), cols)
    assert len(" ".join(line)) + rp.MARK_WIDTH <= 118
    all_vllm = run(scrape(8))
    assert rp.widths(all_vllm.replicas, 118)[rp.ENGINE] == 0  # the header's one engine
