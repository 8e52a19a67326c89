"""The pipeline on captures made from the simulated engine, in virtual time, against its truth.

The sim renders vLLM 0.32's /metrics and dcgm-exporter text; driving it on a virtual clock
gives scripted loads (light, KV exhaustion) whose true numbers the engine itself knows.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.exposition import promtext
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings
from llmtop.sim.dcgm import DcgmTelemetry
from llmtop.sim.metrics import MetricsRenderer
from llmtop.sim.model import Engine, EngineConfig
from llmtop.sim.profiles import get_profile
from llmtop.sources.gpu.dcgm import DCGM_KEEP, parse_dcgm
from llmtop.sources.vllm import VLLM_KEEP

URL = "http://sim"


def run_sim(
    *,
    kv_tokens: int | None,
    max_num_seqs: int,
    arrivals: list[tuple[float, int, int]],
    until: float,
) -> list[RawPoll]:
    """Drive the engine; scrape /metrics and dcgm text once per virtual second."""
    profile = get_profile("seed")
    cfg = EngineConfig.from_profile(
        profile, kv_tokens=kv_tokens, max_num_seqs=max_num_seqs, max_model_len=4096
    )
    engine = Engine(cfg, now=0.0)
    renderer = MetricsRenderer(engine, "sim-model", 0.0)
    dcgm = DcgmTelemetry(engine, 0.0)
    pending = sorted(arrivals)
    polls: list[RawPoll] = []
    t = 1.0
    while t <= until:
        while engine.now < t:
            while pending and pending[0][0] <= engine.now:
                _, prompt, out = pending.pop(0)
                engine.add_request(prompt, out)
            if engine.has_work():
                engine.step()
            else:
                nxt = pending[0][0] if pending else t
                engine.advance_to(min(nxt, t))
        samples = promtext.parse(renderer.render(), VLLM_KEEP)
        gpus = parse_dcgm(promtext.parse(dcgm.render(engine.now), DCGM_KEEP))
        polls.append(RawPoll(time=t, engines=(RawEngine(URL, samples),), gpus=gpus))
        t += 1.0
    return polls


def test_light_load_is_ok_and_rates_match_the_engine() -> None:
    arrivals = [(i * 0.5, 200, 64) for i in range(80)]
    polls = run_sim(kv_tokens=None, max_num_seqs=16, arrivals=arrivals, until=40)
    p = Pipeline(HealthSettings())
    snaps = [p.update(x) for x in polls]
    assert snaps[-1].status == "ok"
    assert all(s.findings == () for s in snaps)
    gen = [s.engines[0] for s in snaps[15:]]
    decode = sum(e.decode_tok_per_s or 0 for e in gen) / len(gen)
    assert decode == pytest.approx(2 * 64, rel=0.15)  # 2 req/s x 64 tokens
    assert snaps[-1].gpus
    assert snaps[-1].gpus[0].source == "dcgm"


def test_kv_exhaustion_is_found_with_the_fit() -> None:
    arrivals = [(0.1 * i, 1500, 1000) for i in range(40)]
    polls = run_sim(kv_tokens=8192, max_num_seqs=64, arrivals=arrivals, until=60)
    p = Pipeline(HealthSettings())
    snaps = [p.update(x) for x in polls]
    hit = [s for s in snaps if any(f.id == "kv-exhausted" for f in s.findings)]
    assert hit, [s.engines[0].kv_cache_usage_frac for s in snaps]
    f = next(f for f in hit[-1].findings if f.id == "kv-exhausted")
    assert f.severity == "critical"
    assert "7,372 KV tokens (90% target of 8,192)" in f.summary
    assert len(hit) >= len(snaps) // 2  # held, not flapping, though KV usage oscillates
    e = hit[-1].engines[0]
    assert e.mean_prompt_tokens == 1500
    # 90% of 8,192 = 7,372 tokens / (1,500 + 1,000) in 16-token blocks = 2 sequences fit
    assert "= 2 sequences fit" in f.summary
    assert "cap concurrency at ~2" in f.action
    assert hit[-1].status == "critical"


def test_sim_captures_idle_then_load(fixtures_dir: Path) -> None:
    """The sim's committed captures (tests/fixtures/sim-metrics-*.txt) read like vLLM's."""
    idle = promtext.parse((fixtures_dir / "sim-metrics-idle.txt").read_text(), VLLM_KEEP)
    load = promtext.parse((fixtures_dir / "sim-metrics-load.txt").read_text(), VLLM_KEEP)
    p = Pipeline(HealthSettings(fire_after_s=0.0), window_s=30.0)
    assert p.update(RawPoll(time=0.0, engines=(RawEngine(URL, idle),))).status == "unknown"
    snap = p.update(RawPoll(time=30.0, engines=(RawEngine(URL, load),)))
    e = snap.engines[0]
    assert e.up
    assert e.model == "llmtop-sim"
    assert (e.running, e.waiting, e.waiting_capacity) == (52.0, 11.0, 11.0)
    assert e.kv_cache_usage_frac == pytest.approx(0.9699, abs=1e-4)
    assert e.prompt_tok_per_s == pytest.approx(67800 / 30)
    assert e.decode_tok_per_s == pytest.approx(13775 / 30)
    assert e.mean_prompt_tokens == pytest.approx(600.0)
    assert e.finished_per_s["length"] == pytest.approx(2.0)
    assert e.ttft_p50_s is not None
    assert e.ttft_p95_s is not None
    assert e.ttft_p50_s <= e.ttft_p95_s
    assert e.kv_capacity_tokens is not None
    ids = {f.id for f in snap.findings}
    assert "kv-exhausted" in ids  # KV 97% with 12 preemptions and 11 waiting for capacity
    kv = next(f for f in snap.findings if f.id == "kv-exhausted")
    per_req = 600 + 7688 / 60
    block = e.kv_block_size
    assert block is not None
    budget = math.floor(e.kv_capacity_tokens * HealthSettings().kv_target_frac)  # 90% of it
    fit = (budget // block - 1) // math.ceil(per_req / block)  # whole blocks
    assert f"in {block}-token blocks = {fit} sequences fit" in kv.summary
