"""Every engine read through one seam: the dialect is detected from the families a scrape
carries, its families are read under vLLM's names, and what it lacks stays None, never 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.dialects import catalog
from llmtop.core.dialects.dialect import Dialect
from llmtop.core.dialects.engines import DIALECTS
from llmtop.core.exposition import promtext
from llmtop.core.output.summary import unavailable
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.vllm.scrape import EngineScrape
from llmtop.errors import UsageError
from llmtop.settings import HealthSettings

KEEP = promtext.keep_names(catalog.sample_names())
URL = "http://127.0.0.1:30000"

SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 162
sglang:num_running_reqs{model_name="m",tp_rank="1"} 162
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 2826
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",tp_rank="0"} 0.97
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m",tp_rank="0"} 38800
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",tp_rank="0"} {prompt}
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m",tp_rank="0"} {cached}
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m",tp_rank="0"} {gen}
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="m",tp_rank="0"} {retracted}
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",tp_rank="0"} {done}
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="1.0",model_name="m",tp_rank="0"} {fast}
sglang:time_to_first_token_seconds_bucket{le="40.0",model_name="m",tp_rank="0"} {done}
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m",tp_rank="0"} {done}
sglang:time_to_first_token_seconds_sum{model_name="m",tp_rank="0"} {ttft_sum}
sglang:time_to_first_token_seconds_count{model_name="m",tp_rank="0"} {done}
"""


def sglang(**v: float) -> str:
    text = SGLANG
    for k, x in v.items():
        text = text.replace("{" + k + "}", repr(float(x)))
    return text


def scrape_of(text: str, kind: str | None = None) -> EngineScrape:
    return catalog.extract(promtext.parse(text, KEEP), kind=kind)


LLAMACPP = """\
llamacpp:prompt_tokens_total 120
llamacpp:tokens_predicted_total 300
llamacpp:requests_processing 2
llamacpp:requests_deferred 22
"""


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_is_detected_from_its_families(dialect: Dialect) -> None:
    (name, *_) = sorted(dialect.names() or {"vllm:num_requests_running"})
    assert catalog.detect([name]).dialect is dialect
    assert catalog.detect([name]).note is None


def test_sglang_reads_as_its_own_figures() -> None:
    s = scrape_of(
        sglang(prompt=1000, cached=850, gen=500, retracted=3, done=10, fast=2, ttft_sum=300)
    )
    assert s.engine == "sglang"
    assert s.has_vllm
    # tp_rank 1 repeats rank 0's requests: read once, not summed
    assert s.gauges == {"running": 162.0, "waiting": 2826.0, "kv_usage": 0.97}
    assert s.kv_capacity_tokens == 38800
    assert s.counters["preemptions"] == 3.0
    assert s.counters["prefix_hits"] == 850.0
    assert s.counters["prefix_queries"] == 1000.0
    assert s.counters["finished:stop"] == 10.0
    assert s.histograms["ttft"].count == 10.0


def test_llamacpp_lacks_are_none_not_zero() -> None:
    s = scrape_of(LLAMACPP)
    assert s.engine == "llamacpp"
    assert s.gauges == {"running": 2.0, "waiting": 22.0, "kv_usage": None}
    assert s.kv_capacity_tokens is None
    assert s.histograms == {}
    assert "preemptions" not in s.counters


def test_through_the_pipeline_an_sglang_engine_is_named_and_measured() -> None:
    p = Pipeline(HealthSettings())
    first = sglang(prompt=1000, cached=850, gen=500, retracted=0, done=10, fast=10, ttft_sum=5)
    later = sglang(prompt=2000, cached=850, gen=900, retracted=4, done=30, fast=10, ttft_sum=700)
    p.update(RawPoll(1.0, (RawEngine(URL, promtext.parse(first, KEEP)),)))
    e = p.update(RawPoll(3.0, (RawEngine(URL, promtext.parse(later, KEEP)),))).engines[0]
    assert (e.engine, e.engine_note, e.stats_disabled) == ("sglang", None, False)
    assert e.kv_capacity_tokens == 38800
    assert e.preemptions_per_s == pytest.approx(2.0)
    assert e.decode_tok_per_s == pytest.approx(200.0)
    assert e.prefix_cache_hit_frac == pytest.approx(0.0)  # 1000 new prompt tokens, none cached
    assert e.ttft_p95_s is not None
    assert e.ttft_p95_s > 1.0  # 20 new requests, all over 1 s


def test_a_mixed_exposition_is_read_and_said() -> None:
    dynamo = "dynamo_frontend_inflight_requests 5\ndynamo_frontend_queued_requests 1\n"
    s = scrape_of(
        sglang(prompt=1, cached=0, gen=1, retracted=0, done=1, fast=1, ttft_sum=1) + dynamo
    )
    assert s.engine == "sglang"
    assert s.engine_note == "mixes sglang:* and dynamo_frontend_* families: read as SGLang"


def test_an_unknown_engine_reads_as_nothing_and_never_healthy() -> None:
    s = scrape_of("othereng_running_requests 3\nprocess_cpu_seconds_total 2\n")
    assert (s.engine, s.has_vllm) == (None, False)
    p = Pipeline(HealthSettings())
    raw = promtext.parse("othereng_running_requests 3\n", KEEP)
    snap = p.update(RawPoll(1.0, (RawEngine(URL, raw),)))
    assert snap.engines[0].stats_disabled
    assert snap.status != "ok"


def test_a_forced_kind_is_read_and_says_what_it_lacks() -> None:
    assert scrape_of(LLAMACPP, kind="llamacpp").engine_note is None
    s = scrape_of(LLAMACPP, kind="sglang")
    assert s.engine == "sglang"
    assert (
        s.engine_note
        == "forced to read SGLang, whose families it lacks (it exports llamacpp:* families)"
    )
    with pytest.raises(UsageError, match="unknown engine kind 'sglangx': one of vllm, sglang"):
        catalog.dialect_of("sglangx")


def test_vllm_is_read_as_before() -> None:
    text = (
        'vllm:num_requests_running{model_name="m"} 4\nvllm:num_requests_waiting{model_name="m"} 2\n'
    )
    s = scrape_of(text)
    assert (s.engine, s.engine_note) == ("vllm", None)
    assert s.gauges["running"] == 4.0


def test_llamacpp_is_judged_on_what_it_exports_and_says_what_it_cannot() -> None:
    """Two slots busy, 22 deferred, its token counter still (llama.cpp adds a request's tokens
    when it ends): no stale-data, no kv-exhausted (no KV figure), the status read anyway."""
    p = Pipeline(HealthSettings())
    snap = None
    for t in range(0, 40, 2):  # two long generations: nothing counted until they end
        snap = p.update(RawPoll(float(t), (RawEngine(URL, promtext.parse(LLAMACPP, KEEP)),)))
    assert snap is not None
    assert [
        f.id for f in snap.findings if f.id in ("stale-data", "kv-exhausted", "scheduler-stuck")
    ] == []
    assert snap.status != "unknown"
    gone = {(u["finding"], u["why"]) for u in unavailable(snap.engines)}
    assert (
        "kv-exhausted",
        "llama.cpp has exported no KV usage since its PR #13660 (2025-05)",
    ) in gone
    assert ("stale-data", "llama.cpp adds a request's generated tokens when it finishes") in gone
    vllm = 'vllm:num_requests_running{model_name="m"} 4\n'
    assert (
        unavailable(p.update(RawPoll(41.0, (RawEngine(URL, promtext.parse(vllm, KEEP)),))).engines)
        == []
    )


CANONICAL = {
    "running": {"vllm:num_requests_running"},
    "waiting": {"vllm:num_requests_waiting"},
    "kv_usage": {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
    "prompt_tokens": {"vllm:prompt_tokens_total"},
    "generation_tokens": {"vllm:generation_tokens_total"},
    "ttft": {"vllm:time_to_first_token_seconds_count"},
    "itl": {"vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"},
    "e2e": {"vllm:e2e_request_latency_seconds_count"},
    "queue_time": {"vllm:request_queue_time_seconds_count"},
    "preemptions": {"vllm:num_preemptions_total"},
    "prefix_cache": {"vllm:prefix_cache_hits_total"},
    "spec_decode": {"vllm:spec_decode_num_drafts_total"},
    "finished": {"vllm:request_success_total"},
}
"""Each figure as vLLM's sample names a dialect maps it onto (capacity and live tokens are
read otherwise: `Dialect.capacity`, and when an engine counts its tokens)."""


OLD_BUILDS_ONLY = {("llamacpp", "kv_usage"), ("dynamo", "kv_usage")}
"""Read where an older build (or, for Dynamo, a worker's figures re-exported beside the
frontend's) exports it, and said to be lacking in the current one."""


@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d.kind != "vllm"], ids=str)
def test_every_figure_is_read_or_said_to_be_lacking(dialect: Dialect) -> None:
    mapped = set(dialect.renames.values()) | (
        {"vllm:request_success_total"} if dialect.finished else set()
    )
    for figure, names in CANONICAL.items():
        read, lacking = bool(names & mapped), figure in dialect.lacks
        if (dialect.kind, figure) in OLD_BUILDS_ONLY:
            assert (read, lacking) == (True, True)
        else:
            assert read != lacking, f"{dialect.kind}: {figure} read and lacking, or neither"
    assert (dialect.capacity is None) == ("kv_capacity" in dialect.lacks)


ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


def test_a_real_llamacpp_burst_reads_as_its_slots_and_queue() -> None:
    """llama.cpp b11434 (tests/fixtures/engines/llamacpp/: 30 streams behind 2 slots) at its
    deepest queue: 2 processing, 26 deferred, read as running and waiting; no KV figure."""
    text = (ENGINES / "llamacpp" / "metrics-burst.txt").read_text()
    s = scrape_of(text)
    assert (s.engine, s.engine_note) == ("llamacpp", None)
    assert s.gauges == {"running": 2.0, "waiting": 26.0, "kv_usage": None}
    assert s.counters["generation_tokens"] == 192.0
    assert s.counters["prefix_hits"] == 0.0  # prompt_tokens_cached_total, 0 in this burst
    assert s.counters["prefix_queries"] == 64.0  # computed + cached prompt tokens
    assert s.counters["spec_drafts"] == 0.0


@pytest.mark.parametrize(
    ("engine", "path", "kind"),
    [
        ("sglang", "metrics-docs-example.txt", "sglang"),
        ("sglang", "metrics-definitions-0.5.2-load.txt", "sglang"),
        ("trtllm", "metrics-definitions-050f80de-load.txt", "trtllm"),
        ("lmdeploy", "metrics-definitions-0.18.0-load.txt", "lmdeploy"),
        ("tgi", "metrics-definitions-load.txt", "tgi"),
        ("dynamo", "metrics-load.txt", "dynamo"),
    ],
)
def test_each_engines_own_output_reads_in_its_dialect(engine: str, path: str, kind: str) -> None:
    """Each engine's published (or source-generated, or here-captured) /metrics: its dialect
    detected, its queue read, never read as nothing."""
    s = scrape_of((ENGINES / engine / path).read_text())
    assert s.engine == kind
    assert s.has_vllm
    assert s.gauges["running"] is not None
    assert s.gauges["waiting"] is not None


def test_sglangs_documented_example_is_its_queue() -> None:
    """SGLang's own docs example: 162 running, 2,826 queued (read as nothing before)."""
    s = scrape_of((ENGINES / "sglang" / "metrics-docs-example.txt").read_text())
    assert (s.gauges["running"], s.gauges["waiting"]) == (162.0, 2826.0)
