"""engines: vLLM names old and new, data-parallel sums, missing series stay unknown."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.direct_reading import extract_direct
from llmtop.core.base.raw import Sample
from llmtop.core.derive.derive import counter_columns, counter_values
from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import sample_names
from llmtop.core.vllm.reader import extract
from llmtop.core.vllm.scrape import EngineScrape

KEEP = promtext.keep_names(sample_names())


def scrape(text: str) -> EngineScrape:
    return extract(promtext.parse(text, KEEP))


def test_real_load_capture(fixtures_dir: Path) -> None:
    s = scrape((fixtures_dir / "metrics-load.txt").read_text())
    assert s.gauges == {"running": 4.0, "waiting": 42.0, "kv_usage": 1.0}
    assert s.waiting_capacity == 42.0
    assert s.kv_capacity_tokens == 32 * 128
    assert s.kv_block_size == 128
    assert s.model == "tinyllm"
    assert s.has_vllm
    assert s.counters["prompt_tokens"] == 4810.0
    assert s.counters["finished:length"] == 3.0
    assert s.counters["admission:max_num_queued_reqs"] == 0.0
    ttft = s.histograms["ttft"]
    assert ttft.buckets[-1] == (float("inf"), ttft.count)
    assert s.names_used["kv_usage"] == "vllm:kv_cache_usage_perc"
    assert s.names_used["itl"] == "vllm:inter_token_latency_seconds"


def test_old_names_are_read() -> None:
    s = scrape(
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 3\n'
        'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 12\n'
        'vllm:time_per_output_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4\n'
        'vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5\n'
        'vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 5\n'
        'vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.4\n'
    )
    assert s.gauges["kv_usage"] == 0.5
    assert s.counters["prefix_hits"] == 3.0
    assert s.histograms["itl"].count == 5.0
    assert s.names_used["itl"] == "vllm:time_per_output_token_seconds"


def test_new_name_wins_over_old() -> None:
    s = scrape(
        'vllm:gpu_cache_usage_perc{engine="0"} 0.1\nvllm:kv_cache_usage_perc{engine="0"} 0.7\n'
    )
    assert s.gauges["kv_usage"] == 0.7


def test_two_engines_summed_and_buckets_merged() -> None:
    text = ""
    for eng, (run, le1, inf, kv) in {"0": (3, 2, 5, 0.2), "1": (4, 1, 3, 0.8)}.items():
        lab = f'engine="{eng}",model_name="m"'
        blocks = 100 if eng == "0" else 300
        text += (
            f"vllm:num_requests_running{{{lab}}} {run}\n"
            f"vllm:kv_cache_usage_perc{{{lab}}} {kv}\n"
            f'vllm:cache_config_info{{block_size="16",engine="{eng}",'
            f'num_gpu_blocks="{blocks}"}} 1\n'
            f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.5"}} {le1}\n'
            f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {inf}\n'
            f"vllm:time_to_first_token_seconds_count{{{lab}}} {inf}\n"
            f"vllm:time_to_first_token_seconds_sum{{{lab}}} 1.0\n"
        )
    s = scrape(text)
    assert s.gauges["running"] == 7.0
    assert s.gauges["kv_usage"] == pytest.approx((0.2 * 100 + 0.8 * 300) / 400)  # not summed
    assert s.kv_capacity_tokens == (100 + 300) * 16
    h = s.histograms["ttft"]
    assert h.buckets == ((0.5, 3.0), (float("inf"), 8.0))
    assert (h.count, h.sum) == (8.0, 2.0)


def test_missing_gauges_are_unknown_not_zero() -> None:
    # A multi-API-server vLLM before its first request: counters, no gauges.
    s = scrape('vllm:prompt_tokens_total{engine="0",model_name="m"} 0\n')
    assert s.gauges == {"running": None, "waiting": None, "kv_usage": None}
    assert s.waiting_capacity is None
    assert s.kv_capacity_tokens is None
    assert s.has_vllm


def test_disable_log_stats_has_no_vllm_series(fixtures_dir: Path) -> None:
    text = "\n".join(
        line
        for line in (fixtures_dir / "metrics-idle.txt").read_text().splitlines()
        if "vllm:" not in line
    )
    s = scrape(text)
    assert not s.has_vllm
    assert s.counters == {}


@pytest.mark.parametrize("blocks", ["None", ""])
def test_unset_cache_config_is_unknown(blocks: str) -> None:
    s = scrape(
        f'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{blocks}"}} 1\n'
    )
    assert s.kv_capacity_tokens is None


def _buckets_one_by_one(samples: list[Sample]) -> list[tuple[float, float]]:
    """The buckets as a first reading adds them up: sample by sample into a dict, sorted."""
    out: dict[float, float] = defaultdict(float)
    for s in samples:
        le = dict(s.labels).get("le")
        if le is not None:
            out[float("inf") if le in ("+Inf", "Inf", "inf") else float(le)] += s.value
    return sorted(out.items())


_LES = ["0.1", "0.5", "1", "1.0", "+Inf", "Inf", "2.5", "-0", "0"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["0", "1", "2"]),  # engine
            st.sampled_from([*_LES, None]),  # le (None: no le label)
            st.floats(-10, 1e6, allow_nan=False) | st.sampled_from([0.0, -0.0, 3.0]),
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 3),
)
def test_bucket_plans_add_up_as_sample_by_sample(
    rows: list[tuple[str, str | None, float]], scrapes: int
) -> None:
    """The buckets worked out once per label set (engines summed, bounds spelled two ways,
    samples without a bound) equal a sample-by-sample sum, bit for bit, scrape after scrape."""
    labels = [
        tuple(sorted([("engine", eng)] + ([("le", le)] if le is not None else [])))
        for eng, le, _ in rows
    ]
    for k in range(scrapes + 1):  # the same label sets again: the memoised plan
        samples = [
            Sample("vllm:e2e_request_latency_seconds_bucket", ls, v * (k + 1))
            for ls, (_, _, v) in zip(labels, rows, strict=True)
        ]
        got = extract(tuple(samples)).histograms.get("e2e")
        want = _buckets_one_by_one(samples)
        assert got is not None
        assert repr(list(got.buckets)) == repr(want)


def test_a_nan_bound_is_summed_as_it_comes() -> None:
    samples = (
        Sample("vllm:e2e_request_latency_seconds_bucket", (("le", "NaN"),), 1.0),
        Sample("vllm:e2e_request_latency_seconds_bucket", (("le", "+Inf"),), 2.0),
    )
    got = extract(samples).histograms["e2e"].buckets
    assert repr(list(got)) == repr(_buckets_one_by_one(list(samples)))


_NAMES = sorted(sample_names() | {"python_gc_objects_collected_total"})
_OFTEN = [
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:cache_config_info",
    "vllm:request_success_total",
    "vllm:admission_rejections_total",
    "vllm:num_requests_waiting_by_reason",
    "vllm:prompt_tokens_by_source_total",
    "vllm:time_to_first_token_seconds_bucket",
]
"""Names whose samples are summed in more than one way: drawn as often as all the others."""
_LABEL_VALUES = {
    "engine": ["0", "1"],
    "reason": ["capacity", "deferred", "max_num_queued_reqs"],
    "finished_reason": ["stop", "length", "error"],
    "source": ["local_compute", "local_cache_hit"],
    "le": ["0.1", "1", "1.0", "+Inf", "NaN"],
    "model_name": ["m", "n"],
    "num_gpu_blocks": ["32", "64", "None"],
    "block_size": ["16", "128"],
}


@st.composite
def _scrapes(draw: st.DrawFn) -> list[tuple[Sample, ...]]:
    """A structure (names, label sets) and several scrapes of it with other values."""
    shape = draw(
        st.lists(
            st.tuples(
                st.sampled_from(_NAMES) | st.sampled_from(_OFTEN),
                st.dictionaries(
                    st.sampled_from(sorted(_LABEL_VALUES)),
                    st.integers(0, 2),
                    max_size=4,
                ),
            ),
            min_size=1,
            max_size=40,
        )
    )
    labels = [
        tuple(sorted((k, _LABEL_VALUES[k][i % len(_LABEL_VALUES[k])]) for k, i in d.items()))
        for _, d in shape
    ]
    values = st.floats(-10, 1e6, allow_nan=False) | st.sampled_from([0.0, -0.0, 0.1, 3.0])
    polls = draw(
        st.lists(st.lists(values, min_size=len(shape), max_size=len(shape)), min_size=1, max_size=3)
    )
    return [
        tuple(Sample(name, ls, v) for (name, _), ls, v in zip(shape, labels, vs, strict=True))
        for vs in polls
    ]


@given(_scrapes())
@settings(max_examples=300)
def test_planned_extraction_equals_the_direct_reading(scrapes: list[tuple[Sample, ...]]) -> None:
    """Whatever the structure (families old and new, engines, reasons, bounds spelled two
    ways or NaN, cache_config with or without blocks): the plan's figures are the direct reading's,
    bit for bit and in the same order, scrape after scrape of one structure."""
    for samples in scrapes:
        try:
            want = repr(extract_direct(samples))
        except (ValueError, ZeroDivisionError) as e:
            with pytest.raises(type(e)):
                extract(samples)
            continue
        planned = extract(samples)
        assert repr(planned) == want
        values = counter_values(extract_direct(samples))
        assert repr(counter_columns(planned)) == repr((tuple(values), list(values.values())))
