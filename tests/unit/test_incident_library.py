"""The incident library holds: every class named with its bottleneck by its second, no
warning or critical on a healthy run, and every finding llmtop has either in the library or
said why not (bench/bench_findings.py is the scorer; this is its verdict, in a few seconds)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from llmtop.core.dialects.catalog import KINDS
from llmtop.core.findings.catalog import RULES

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "tests" / "fixtures" / "incidents"
NOT_IN_LIBRARY = {
    "stats-disabled": "a scrape with no vllm:* series: tests/unit/test_pipeline.py reads one",
    "gateway-saturated": "the gateway's: tests/fixtures/gateway-queue.jsonl.gz and demo-story",
    "gateway-queue-over-slo": "the gateway's: tests/fixtures/gateway-queue.jsonl.gz",
    "gateway-paused": "the gateway's: tests/integration/test_gateway_*.py",
    "gateway-down": "the gateway's: tests/fixtures/recording-story.jsonl.gz",
}


def _scorer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_findings", ROOT / "bench" / "bench_findings.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_findings"] = module
    spec.loader.exec_module(module)
    return module


def test_every_class_is_named_in_time_and_healthy_runs_raise_nothing() -> None:
    scorer = _scorer()
    results = scorer.score(LIBRARY)
    assert scorer.misses(results) == []
    healthy = [r for r in results if r.healthy]
    assert len(healthy) >= 7
    assert sum(r.seconds for r in healthy) >= 1800  # the sim's 30 minutes among them
    assert all(r.false_alarms == [] for r in healthy)
    # every engine has a healthy run (its own dialect: what it lacks is absent), none alarms
    assert {r.engine for r in healthy} == set(KINDS)
    assert "| class | engine |" in scorer.table(results)
    engines = {r.name: r.engine for r in results}
    assert engines["real-llamacpp-burst"] == engines["real-llamacpp-healthy"] == "llamacpp"
    assert engines["sglang-kv-exhausted"] == "sglang"


def test_the_library_covers_every_engine_and_gpu_finding() -> None:
    manifest = json.loads((LIBRARY / "manifest.json").read_text())
    expected = {e["finding"] for entry in manifest for e in entry["expect"]}
    missing = {r.id for r in RULES} - expected - set(NOT_IN_LIBRARY)
    assert missing == set()
    for entry in manifest:
        assert (LIBRARY / entry["recording"]).is_file()
        assert entry["source"]
