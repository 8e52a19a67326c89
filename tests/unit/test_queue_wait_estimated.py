"""llama.cpp's queue behind its slots, named without a gateway: the wait estimated from its
deferred requests, its token rates and its longest sequence, said to be an estimate; never on
an idle engine, a drained one, or an engine whose TTFT histogram degraded-200 reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import EngineStats, Snapshot
from llmtop.core.dialects import catalog
from llmtop.core.exposition import promtext
from llmtop.core.findings.slots import estimated_wait_s
from llmtop.core.output.summary import finding_json
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings

KEEP = promtext.keep_names(catalog.sample_names())
LLAMACPP = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "llamacpp"
URL = "http://127.0.0.1:8080"


def run(*polls: tuple[float, str]) -> list[Snapshot]:
    """The real b11434 captures (metrics-<name>.txt) through one pipeline at these times."""
    p = Pipeline(HealthSettings())
    out = []
    for t, name in polls:
        samples = promtext.parse((LLAMACPP / f"metrics-{name}.txt").read_text(), KEEP)
        out.append(p.update(RawPoll(t, (RawEngine(URL, samples, engine="llamacpp"),))))
    return out


def ids(snap: Snapshot) -> list[str]:
    return [f.id for f in snap.findings]


def test_the_real_burst_is_named_as_an_estimated_queue_wait() -> None:
    """Idle, then the burst's capture (26 deferred behind 2 slots, 192 tokens predicted and 64
    prompt tokens since): held past fire_after_s, the estimate is named, in words and in its id."""
    snaps = run((0.0, "idle"), *((float(t), "burst") for t in range(1, 6)))
    e = snaps[1].engines[0]
    assert (e.waiting, e.longest_seq_tokens) == (26.0, 111.0)
    # 26 deferred x 111 tokens / (64 + 192 tok/s over the one second since idle)
    assert estimated_wait_s(e) == 26 * 111 / 256
    fired = [f for f in snaps[-1].findings if f.id == "queue-wait-estimated"]
    assert len(fired) == 1
    f = fired[0]
    assert (f.severity, f.bottleneck) == ("warning", "queue")
    assert "estimated queue wait" in f.summary
    assert "an estimate" in f.summary
    assert "26 requests wait behind 2 busy slots" in f.summary
    assert "--autopilot" in f.action
    assert "llama-server with a higher --parallel" in f.action
    js = finding_json(f)  # snapshot --json's: the id and the words say it is an estimate
    assert js["id"] == "queue-wait-estimated"
    assert "an estimate" in js["summary"]


def test_idle_and_drained_are_not_named() -> None:
    snaps = run(
        *((float(t), "idle") for t in range(5)), *((float(t), "after") for t in range(5, 10))
    )
    assert all("queue-wait-estimated" not in ids(s) for s in snaps)
    assert all(estimated_wait_s(s.engines[0]) is None for s in snaps)


def test_an_engine_with_ttft_or_no_rate_is_not_estimated() -> None:
    e = EngineStats(
        URL, True, engine="llamacpp", running=2, waiting=20, longest_seq_tokens=100,
        prompt_tok_per_s=50.0, decode_tok_per_s=150.0,
    )  # fmt: skip
    assert estimated_wait_s(e) == 20 * 100 / 200
    assert estimated_wait_s(replace(e, engine="vllm")) is None  # degraded-200 reads its TTFT
    assert estimated_wait_s(replace(e, prompt_tok_per_s=None, decode_tok_per_s=0.0)) is None
    assert estimated_wait_s(replace(e, longest_seq_tokens=None)) is None
