"""PromQL for the fleet: queries built in pure code, answers read into per-replica stats."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from llmtop.core import promql
from llmtop.errors import UsageError
from llmtop.sources.prometheus import PrometheusSource


def test_selector_matchers_are_checked_and_reused() -> None:
    assert promql.selector_matchers('{job="vllm", namespace=~"prod-.*"}') == (
        'job="vllm",namespace=~"prod-.*"'
    )
    assert promql.selector_matchers(None) == ""
    for bad in ('job="vllm"', "{job=vllm}", '{job="a" x}'):
        with pytest.raises(UsageError, match="--selector"):
            promql.selector_matchers(bad)


def test_every_series_carries_the_selector_and_every_figure_is_tagged() -> None:
    q = promql.Queries('job="vllm"', 30.0)
    for text in (q.gauges(), q.rates(), q.quantiles(), q.bucket_bounds()):
        names = re.findall(r"vllm:[a-z0-9_:]+(.)", text)
        assert names
        assert set(names) == {"{"}, text  # every series has a selector...
        series = text.count("vllm:") + text.count("up{")
        assert series == text.count('{job="vllm"')  # ...holding the user's matchers
        assert text.count("label_replace(") == text.count('"llmtop_figure"')
    assert 'up{job="vllm"}' in q.gauges()
    assert "[30s]" in q.rates()
    assert "histogram_quantile(0.95, sum by (instance, engine, le)" in q.quantiles()
    assert "(vllm:inter_token_latency_seconds_bucket" in q.quantiles()  # new name first...
    assert "or rate(vllm:time_per_output_token_seconds_bucket" in q.quantiles()  # ...old after


def item(figure: str, value: float | str, **labels: str) -> dict[str, Any]:
    return {"metric": {"llmtop_figure": figure, **labels}, "value": [0, str(value)]}


ANSWER = [
    item("up", 1, instance="a:1"),
    item("running", 4, instance="a:1", engine="0", model_name="m"),
    item("waiting", 2, instance="a:1", engine="0"),
    item("kv_usage", 0.5, instance="a:1", engine="0"),
    item("cache_config", 1, instance="a:1", engine="0", num_gpu_blocks="32", block_size="128"),
    item("generation_tokens", 100, instance="a:1", engine="0"),
    item("finished", 1.5, instance="a:1", engine="0", finished_reason="stop"),
    item("q:itl:0.95", 0.00475, instance="a:1", engine="0"),
    item("mean:itl", 0.003, instance="a:1", engine="0"),
    item("q:ttft:0.95", "NaN", instance="a:1", engine="0"),
    item("up", 0, instance="b:1"),
    item("up", 1, instance="c:1"),
    *(item("running", 3, instance="c:1", engine=e, model_name="m") for e in ("0", "1")),
    item("waiting", 1, instance="c:1", engine="0"),
    item("waiting", 9, instance="c:1", engine="1"),
    item("kv_usage", 0.2, instance="c:1", engine="0"),
    item("kv_usage", 1.0, instance="c:1", engine="1"),
    *(
        item("cache_config", 1, instance="c:1", engine=e, num_gpu_blocks="100", block_size="16")
        for e in ("0", "1")
    ),
    item("q:ttft:0.95", 1.5, instance="c:1"),
    item("itl", 2, le="0.01"),  # a bucket_bounds answer: no replica label, read once
]


def test_answers_become_replicas_with_data_parallel_sub_rows() -> None:
    rows = promql.read_answers([ANSWER])
    assert promql.data_parallel(rows)
    out = {r.name: r for r in promql.replicas(rows, {"itl": 0.01})}
    a = out["a:1"].stats
    assert (a.up, a.model, a.running, a.waiting, a.kv_cache_usage_frac) == (True, "m", 4, 2, 0.5)
    assert a.kv_capacity_tokens == 32 * 128
    assert a.decode_tok_per_s == 100
    assert a.decode_tok_per_s_per_seq == 25
    assert a.finished_per_s == {"stop": 1.5}
    assert a.itl_p95_s == 0.003  # inside the first bucket: the window mean, as derive does
    assert a.ttft_p95_s is None  # NaN: unknown, never zero
    assert not out["b:1"].stats.up
    assert "up == 0" in (out["b:1"].stats.error or "")
    c = out["c:1"].stats
    assert (c.running, c.waiting, c.kv_cache_usage_frac) == (6, 10, 0.6)  # blocks-weighted
    assert c.ttft_p95_s == 1.5  # the server's own quantile, by replica
    sub = out["c:1#1"]
    assert (sub.parent, sub.engine, sub.stats.waiting) == ("c:1", "1", 9)


def test_the_source_asks_a_handful_of_queries_and_a_dead_server_is_one_down_row() -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.content.decode())["query"][0]
        asked.append(query)
        body = {"status": "success", "data": {"resultType": "vector", "result": ANSWER}}
        return httpx.Response(200, content=json.dumps(body))

    async def poll_twice() -> list[Any]:
        source = PrometheusSource("http://prom:9090", transport=httpx.MockTransport(answer))
        try:
            await source.read()
            return await source.read()
        finally:
            await source.aclose()

    rows = asyncio.run(poll_twice())
    assert len(asked) == 1 + 4 + 4  # bucket bounds once, then four a poll (a DP server seen)
    assert {r.name for r in rows} >= {"a:1", "b:1", "c:1", "c:1#0", "c:1#1"}

    async def dead() -> list[Any]:
        refuse = httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused")))
        source = PrometheusSource("http://prom:9090", transport=refuse)
        try:
            return await source.read()
        finally:
            await source.aclose()

    (row,) = asyncio.run(dead())
    assert row.name == "prometheus"
    assert not row.stats.up
    assert "cannot connect to http://prom:9090/api/v1/query" in (row.stats.error or "")
