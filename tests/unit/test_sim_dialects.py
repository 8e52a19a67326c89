"""The sim speaks each engine's dialect from the tables llmtop reads it with: its exposition in
dialect X, parsed and read back through `catalog.extract`, gives the figures the vLLM exposition of
the same moment gives for everything X maps, and None for what X lacks; the text is well formed
(HELP and TYPE name each family), and the info endpoints answer the engine's way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmtop.core.dialects import catalog
from llmtop.core.dialects.dialect import FIGURES, Dialect, histogram
from llmtop.core.dialects.engines import DIALECTS, LLAMACPP, SGLANG, TGI, TRTLLM, VLLM
from llmtop.core.dialects.speak import Speaker, speaker
from llmtop.core.exposition import promtext
from llmtop.core.vllm.scrape import EngineScrape
from llmtop.errors import ConfigError
from llmtop.settings import SimSettings, load
from llmtop.sim.exposition import restrict
from llmtop.sim.metrics import MetricsRenderer
from llmtop.sim.model import Engine, EngineConfig
from llmtop.sim.profiles import get_profile
from llmtop.sim.server import create_app

KEEP = promtext.keep_names(catalog.sample_names())
OTHERS = [d for d in DIALECTS if d is not VLLM]


def _finished(s: EngineScrape) -> float | None:
    done = [v for k, v in s.counters.items() if k.startswith("finished:")]
    return sum(done) if done else None


READ: dict[str, Callable[[EngineScrape], Any]] = {
    "running": lambda s: s.gauges.get("running"),
    "waiting": lambda s: s.gauges.get("waiting"),
    "kv_usage": lambda s: s.gauges.get("kv_usage"),
    "kv_capacity": lambda s: s.kv_capacity_tokens,
    "prompt_tokens": lambda s: s.counters.get("prompt_tokens"),
    "generation_tokens": lambda s: s.counters.get("generation_tokens"),
    "ttft": lambda s: s.histograms.get("ttft"),
    "itl": lambda s: s.histograms.get("itl"),
    "e2e": lambda s: s.histograms.get("e2e"),
    "queue_time": lambda s: s.histograms.get("queue_time"),
    "preemptions": lambda s: s.counters.get("preemptions"),
    "prefix_cache": lambda s: s.counters.get("prefix_hits"),
    "spec_decode": lambda s: s.counters.get("spec_drafts"),
    "finished": _finished,
}
"""Each figure a dialect maps or lacks, as a scrape read through `catalog.extract` has it."""


def test_every_figure_is_read() -> None:
    # when an engine counts its tokens (`live_tokens`) is no name a round trip could see
    assert set(READ) == set(FIGURES) - {"live_tokens"}


@pytest.fixture(scope="module")
def engine() -> Engine:
    """A busy moment of the fast profile: running and waiting, the cache near full after a
    preemption, requests finished by length and one aborted."""
    e = Engine(EngineConfig.from_profile(get_profile("fast")))
    for _ in range(10):
        e.add_request(600, 150)
    for _ in range(160):
        e.step()
    late = [e.add_request(600, 150) for _ in range(4)]
    for _ in range(5):
        e.step()
    e.abort(late[-1])
    st = e.stats
    assert e.running
    assert e.waiting
    assert st.num_preemptions > 0
    assert st.finished["length"] > 0
    assert st.finished["abort"] == 1
    return e


def read(text: str) -> EngineScrape:
    return catalog.extract(promtext.parse(text, KEEP))


def spoken(engine: Engine, d: Dialect) -> tuple[str, str]:
    """The vLLM exposition and dialect d's, of one moment."""
    m = MetricsRenderer(engine, "m", 1.7e9, d)
    return m.render_vllm(), m.render()


@pytest.mark.parametrize("d", OTHERS, ids=lambda d: d.kind)
def test_round_trip_gives_the_vllm_figures_or_none(engine: Engine, d: Dialect) -> None:
    vllm_text, text = spoken(engine, d)
    theirs, ours = read(text), read(vllm_text)
    assert (theirs.engine, theirs.engine_note, theirs.has_vllm) == (d.kind, None, True)
    assert (ours.engine, ours.engine_note) == ("vllm", None)
    sp = speaker(d)
    assert sp.figures.isdisjoint(d.lacks)
    counted = {r for reasons in sp.reasons.values() for r in reasons}
    for figure, get in READ.items():
        if figure == "finished" and counted:  # a reason it has no counter for goes uncounted
            done = sum(v for k, v in ours.counters.items() if k.split(":")[-1] in counted)
            assert get(theirs) == done > 0
            assert "abort" not in counted or get(theirs) == get(ours)
        elif figure in sp.figures:
            if figure != "spec_decode":  # the sim does not decode speculatively
                assert get(ours) is not None, figure
            assert get(theirs) == get(ours), figure
        else:  # lacked (or not in its tables): left out, never invented
            assert get(theirs) is None, figure
    assert {"running", "waiting"} <= sp.figures
    assert theirs.gauges["running"] == len(engine.running)
    assert theirs.gauges["waiting"] == len(engine.waiting)
    if "abort" in sp.by_reason or d is TRTLLM:  # an abort stays an abort
        assert theirs.counters["finished:abort"] == ours.counters["finished:abort"] == 1.0
    if d.capacity is not None and d.capacity[1] is not None:  # blocks and tokens per block
        assert theirs.kv_block_size == ours.kv_block_size == 16


def test_what_each_engine_lacks_reads_none(engine: Engine) -> None:
    llamacpp = read(spoken(engine, LLAMACPP)[1])
    assert llamacpp.gauges["kv_usage"] is None  # mapped under its pre-2025-05 name, lacked now
    assert (llamacpp.kv_capacity_tokens, llamacpp.histograms) == (None, {})
    assert "preemptions" not in llamacpp.counters
    tgi = read(spoken(engine, TGI)[1])
    assert "ttft" not in tgi.histograms
    assert tgi.histograms["itl"].count > 0
    sglang = read(spoken(engine, SGLANG)[1])
    assert sglang.kv_capacity_tokens == engine.config.kv_tokens  # in tokens, its way
    assert sglang.counters["preemptions"] == engine.stats.num_preemptions > 0


@pytest.mark.parametrize("d", OTHERS, ids=lambda d: d.kind)
def test_the_text_is_the_engines_own_and_well_formed(engine: Engine, d: Dialect) -> None:
    text = spoken(engine, d)[1]
    families = list(text_string_to_metric_families(text))
    own = d.names()
    for fam in families:
        assert fam.type in ("counter", "gauge", "histogram", "unknown"), (fam.name, fam.type)
        if fam.type == "unknown":  # a histogram's sum alone (TGI's, Dynamo's token sums)
            assert fam.name.endswith("_sum")
        for s in fam.samples:
            # prometheus_client's parser puts _total on a counter that lacks it (TGI's)
            assert s.name in own or s.name.removesuffix("_total") in own, s.name
            if d.keep_label is not None:
                assert s.labels[d.keep_label[0]] == d.keep_label[1]
            assert "engine" not in s.labels
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")]
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert helps == types
    assert len(set(helps)) == len(helps)  # one HELP and TYPE a family, its samples below it
    name = sorted(own & {s.name for f in families for s in f.samples})[0]
    narrow = restrict(text, {name})
    assert [line for line in narrow.splitlines() if not line.startswith("#")]
    assert narrow.count("# TYPE") == 1


def test_sglang_speaks_its_names_and_tp_rank(engine: Engine) -> None:
    text = spoken(engine, SGLANG)[1]
    assert 'sglang:num_running_reqs{model_name="m",tp_rank="0"} ' in text
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in text
    assert f'sglang:max_total_num_tokens{{tp_rank="0"}} {float(engine.config.kv_tokens)}' in text
    # the first name of a family renamed between versions, never both
    assert "sglang:num_retracted_requests_total" in text
    assert "sglang:total_retracted_reqs" not in text
    assert "vllm:" not in text


def test_finished_requests_fold_into_the_engines_counters(engine: Engine) -> None:
    text = spoken(engine, SGLANG)[1]
    done = engine.stats.finished
    completed = done["stop"] + done["length"]
    assert f'sglang:num_requests_total{{model_name="m",tp_rank="0"}} {float(completed)}' in text
    assert 'sglang:num_aborted_requests_total{model_name="m",tp_rank="0"} 1.0' in text
    assert speaker(SGLANG).reasons["sglang:num_requests_total"] == ("length", "stop")
    tgi = spoken(engine, TGI)[1]
    assert f'tgi_request_success{{model_name="m"}} {float(completed)}' in tgi


def test_llamacpp_says_its_longest_sequence(engine: Engine) -> None:
    """n_tokens_max, which llama.cpp's queue-wait estimate reads, has no vLLM family: the sim
    keeps its longest finished sequence and says it only in the dialects that export one."""
    longest = engine.stats.longest_seq_tokens
    assert longest == 750  # the requests that finished: 600 prompt + 150 generated
    text = spoken(engine, LLAMACPP)[1]
    assert f"llamacpp:n_tokens_max_total {float(longest)}" in text
    assert read(text).counters["longest_seq_tokens"] == longest
    assert "n_tokens_max" not in spoken(engine, SGLANG)[1]
    assert "longest_seq" not in spoken(engine, SGLANG)[1]


def test_vllm_is_spoken_as_it_was(engine: Engine) -> None:
    m = MetricsRenderer(engine, "m", 1.7e9, VLLM)
    assert m.render() == m.render_vllm() == MetricsRenderer(engine, "m", 1.7e9).render()


@pytest.mark.parametrize(
    ("renames", "why"),
    [
        (
            {"x:ttft_bucket": "vllm:time_to_first_token_seconds_bucket"},
            "not spoken whole",
        ),
        (
            {
                **histogram("x:a", "vllm:time_to_first_token_seconds"),
                "x:b_sum": "vllm:time_to_first_token_seconds_sum",
                "x:c_count": "vllm:time_to_first_token_seconds_count",
            },
            None,  # the first own name of each wins: x:a whole
        ),
        (
            {
                "x:a_bucket": "vllm:time_to_first_token_seconds_bucket",
                "x:b_sum": "vllm:time_to_first_token_seconds_sum",
                "x:b_count": "vllm:time_to_first_token_seconds_count",
            },
            "spoken as x:a and x:b",
        ),
        ({"x:up": "vllm:not_a_name_llmtop_reads"}, "which llmtop does not read"),
    ],
)
def test_an_inversion_that_is_not_well_defined_is_refused(
    renames: dict[str, str], why: str | None
) -> None:
    d = Dialect(kind="x", title="X", prefix="x:", renames=renames)
    if why is None:
        assert Speaker(d).families["x:a_sum"].family == "x:a"
        return
    with pytest.raises(ValueError, match=why):
        Speaker(d)


@pytest.mark.parametrize(
    ("d", "path", "expected"),
    [
        (VLLM, "/version", {"version": "0.32.0"}),
        (SGLANG, "/get_server_info", {"engine": "sglang", "max_total_num_tokens": 4096}),
        (LLAMACPP, "/props", {"engine": "llamacpp", "total_slots": 256}),
        (TGI, "/info", {"engine": "tgi", "model_id": "llmtop-sim"}),
        (TRTLLM, "/version", {"engine": "trtllm"}),
    ],
    ids=lambda v: v.kind if isinstance(v, Dialect) else None,
)
async def test_each_engine_answers_its_own_info_endpoint(
    d: Dialect, path: str, expected: dict[str, Any]
) -> None:
    app = create_app(SimSettings(profile="fast", dialect=d.kind))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://sim"
    ) as client:
        doc = (await client.get(path)).json()
        assert expected.items() <= doc.items()
        if d is not VLLM:
            assert doc["version"].startswith("llmtop-sim/")  # never a real engine's version
            assert (await client.get("/version")).status_code == (200 if d is TRTLLM else 404)
        metrics = await client.get("/prometheus/metrics")
        assert metrics.status_code == (200 if d is TRTLLM else 404)
        if d is TRTLLM:
            assert "trtllm_num_requests_running{" in metrics.text


def test_the_dialect_setting_says_the_choices_in_one_line() -> None:
    assert load(SimSettings, flags={"dialect": "sglang"}, environ={}).dialect == "sglang"
    assert load(SimSettings, environ={}).dialect == "vllm"
    with pytest.raises(ConfigError) as e:
        load(SimSettings, flags={"dialect": "sglangx"}, environ={})
    assert str(e.value) == (
        "--dialect: unknown engine kind 'sglangx': one of vllm, sglang, trtllm, lmdeploy,"
        " llamacpp, tgi, dynamo"
    )
    with pytest.raises(ConfigError, match=r"^LLMTOP_SIM_DIALECT: unknown engine kind"):
        load(SimSettings, environ={"LLMTOP_SIM_DIALECT": "vllm2"})
