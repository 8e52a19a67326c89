"""PromQL for the fleet: queries built in pure code, answers read into per-replica stats."""

from __future__ import annotations

import asyncio
import errno
import json
import re
from pathlib import Path
from typing import Any

import pytest

from llmtop.core.base.raw import PromAnswers, RawPoll
from llmtop.core.promql import promql
from llmtop.core.promql.promql_answers import (
    Info,
    data_parallel,
    prometheus_replicas,
    read_info,
    read_rows,
    replicas,
    stale,
)
from llmtop.errors import UsageError
from llmtop.sources.prometheus import Fetch, PrometheusSource
from tests.support.promtool import check_promql

REASONS = ("length", "stop")


def test_selector_matchers_are_checked_and_reused() -> None:
    assert promql.selector_matchers('{job="vllm", namespace=~"prod-.*"}') == (
        'job="vllm",namespace=~"prod-.*"'
    )
    assert promql.selector_matchers(None) == ""
    for bad in ('job="vllm"', "{job=vllm}", '{job="a" x}'):
        with pytest.raises(UsageError, match="--selector"):
            promql.selector_matchers(bad)


def test_the_replica_label_is_checked() -> None:
    assert promql.Queries(replica_label="pod").replica_label == "pod"
    for bad, why in (
        ("k8s-pod", "not a Prometheus label name"),
        ("__name__", "not a Prometheus label name"),
        ("running", "uses that name"),
        ("engine", "uses that name"),
        ("finished_0", "uses that name"),
    ):
        with pytest.raises(UsageError, match=why):
            promql.Queries(replica_label=bad)


def test_every_query_parses_and_every_series_carries_the_selector(tmp_path: Path) -> None:
    q = promql.Queries('job="vllm"', 30.0, "pod")
    figures, quantiles = (p.expr for p in q.replicas(("stop", "we.ird|one")))
    engine_figures, engine_quantiles = (p.expr for p in q.engines(REASONS))
    queries = {"replicas": figures, "quantiles": quantiles, "info": q.info()}
    queries.update({"engines": engine_figures, "engine_quantiles": engine_quantiles})
    check_promql(queries, tmp_path)
    for text in queries.values():
        names = re.findall(r"(?:vllm:[a-z0-9_:]+|(?<![\w\"])up)(.)", text)
        assert names
        assert set(names) == {"{"}, text  # every series has a selector...
        assert len(names) == len(re.findall(r'\{job="vllm"', text))  # ...with the user's matchers
        assert "instance" not in text  # the replica label is the one given
    head = 'max by (pod, llmtop_figures) (label_join(count_values by (pod) ("up", max by (pod) ('
    assert figures.startswith(head + 'up{job="vllm"})')
    assert "* on (pod) group_left (running) count_values by (pod)" in figures
    assert 'finished_reason!~"stop|we\\\\.ird\\\\|one"' in figures  # a reason not known yet
    assert "group_left (finished_1)" in figures
    assert "histogram_quantile" not in figures
    assert quantiles.startswith(head + 'up{job="vllm"})')
    assert "* on (pod) group_left (q_ttft_p95) count_values by (pod)" in quantiles
    assert "histogram_quantile(0.95, sum by (pod, le)" in quantiles
    assert '(vllm:inter_token_latency_seconds_bucket{job="vllm"}[30s])' in quantiles  # new name...
    assert "or rate(vllm:time_per_output_token_seconds_bucket" in quantiles  # ...old after
    assert "sum by (pod, engine, le)" in engine_quantiles
    assert engine_figures.startswith("max by (pod, engine, llmtop_figures) (label_join(")


def test_a_packed_query_names_its_figures_in_the_order_it_joins_them() -> None:
    q = promql.Queries()
    for labels, pair in (("instance", q.replicas(REASONS)), ("instance, engine", q.engines())):
        for packed_query in pair:
            listed = names_of(packed_query.expr)
            assert listed == packed_query.names
            assert len(set(listed)) == len(listed)
            for name in listed[1:]:  # each figure made a label before the join
                assert f'count_values by ({labels}) ("{name}", ' in packed_query.expr
    rest, quantiles = q.replicas(REASONS)
    assert rest.names[0] == quantiles.names[0] == "up"
    assert "finished_1" in rest.names
    assert "q_ttft_p95" in quantiles.names


def names_of(query: str) -> tuple[str, ...]:
    """The labels a packed query joins into llmtop_figures, read from its text as Prometheus
    reads them."""
    tail = query[query.rindex('"llmtop_figures", ",", ') :]
    return tuple(re.findall(r'"([a-z0-9_]+)"', tail)[1:])


def packed(replica: str, engine: str | None = None, **figures: float | str) -> dict[str, Any]:
    """One replica's figures (a test's shorthand; `answer` writes them as Prometheus does)."""
    return {"replica": replica, "engine": engine, "figures": figures}


def answer(
    rows: list[dict[str, Any]], names: tuple[str, ...] | None = None
) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """`rows` as the answer to a packed query joining `names` (by default every figure the rows
    name): each series' values in one label, comma-separated, NaN where a row has none."""
    if names is None:
        names = tuple(dict.fromkeys(k for r in rows for k in r["figures"]))
    series = []
    for r in rows:
        labels = {"instance": r["replica"], **({"engine": r["engine"]} if r["engine"] else {})}
        labels["llmtop_figures"] = ",".join(str(r["figures"].get(n, "NaN")) for n in names)
        series.append({"metric": labels, "value": [1764400000.0, "1"]})
    return names, series


def tagged(figure: str, **labels: str) -> dict[str, Any]:
    return {"metric": {"llmtop_figure": figure, **labels}, "value": [1764400000.0, "1"]}


INFO = [
    *(tagged("replica", instance=r) for r in ("a:1", "b:1", "c:1")),
    tagged("cache_config", instance="a:1", engine="0", num_gpu_blocks="32", block_size="128"),
    *(
        tagged("cache_config", instance="c:1", engine=e, num_gpu_blocks=n, block_size="16")
        for e, n in (("0", "100"), ("1", "300"))
    ),
    tagged("model", instance="a:1", model_name="m"),
    tagged("model", instance="c:1", model_name="m"),
    tagged("reason", finished_reason="stop"),
    tagged("reason", finished_reason="length"),
    tagged("bounds_itl", le="0.01"),
    tagged("bounds_itl", le="0.025"),
    tagged("bounds_itl", le="+Inf"),
    tagged("bounds_ttft", le="0.001"),
]
ROWS = [
    packed(
        "a:1",
        up=1,
        engines=1,
        running=4,
        waiting=2,
        kv_usage=0.5,
        generation_tokens=100,
        finished_0=0.25,  # length
        finished_1=1.5,  # stop
        q_itl_p95=0.00475,
        mean_itl=0.003,
        q_ttft_p95="NaN",
        resets=0,
        new_reasons="NaN",
        waiting_deferred="oops",  # not a number: unknown, and the row is still read
    ),
    packed("b:1", up=0, engines="NaN", running="NaN", new_reasons="NaN"),
    packed("c:1", up=1, engines=2, running=6, waiting=10, kv_usage=0.6, q_ttft_p95=1.5),
]
ENGINES = [
    packed("c:1", "0", running=3, waiting=1, kv_usage=0.2),
    packed("c:1", "1", running=3, waiting=9, kv_usage=1.0),
]


def test_answers_become_replicas_with_data_parallel_sub_rows() -> None:
    info = read_info(INFO)
    assert info.reasons == REASONS
    assert info.first_bounds == {"itl": 0.01, "ttft": 0.001}
    rows = read_rows([answer(ROWS)], info)
    assert data_parallel(rows)
    assert not stale(info, rows, {})
    rows += read_rows([answer(ENGINES)], info, by_engine=True)
    answers = PromAnswers("http://prom", tuple(rows), {"itl": 0.01})
    out = {r.name: r for r in replicas(answers)}
    assert set(out) == {"a:1", "b:1", "c:1", "c:1#0", "c:1#1"}
    a = out["a:1"].stats
    assert (a.up, a.model, a.running, a.waiting, a.kv_cache_usage_frac) == (True, "m", 4, 2, 0.5)
    assert a.kv_capacity_tokens == 32 * 128
    assert a.decode_tok_per_s == 100
    assert a.decode_tok_per_s_per_seq == 25
    assert a.finished_per_s == {"length": 0.25, "stop": 1.5}
    assert a.itl_p95_s == 0.003  # inside the first bucket: the window mean, as derive does
    assert a.ttft_p95_s is None  # NaN: unknown, never zero
    assert a.waiting_deferred is None
    assert out["a:1"].restarts == 0
    assert not out["b:1"].stats.up
    assert "up == 0" in (out["b:1"].stats.error or "")
    c = out["c:1"].stats
    assert (c.running, c.waiting) == (6, 10)  # the server's own figures, by replica
    assert c.kv_cache_usage_frac == pytest.approx((0.2 * 100 + 1.0 * 300) / 400)  # by KV blocks
    assert c.kv_capacity_tokens == 400 * 16
    assert c.ttft_p95_s == 1.5  # the whole server's quantile
    sub = out["c:1#1"]
    assert (sub.parent, sub.engine, sub.stats.waiting, sub.stats.kv_capacity_tokens) == (
        "c:1",
        "1",
        9,
        300 * 16,
    )


def test_a_new_replica_a_new_reason_or_a_restart_asks_for_the_info_again() -> None:
    info = read_info(INFO)
    rows = read_rows([answer(ROWS)], info)
    assert stale(info, read_rows([answer([packed("d:1", up=1)])], info), {})
    assert stale(info, read_rows([answer([packed("a:1", up=1, new_reasons=1)])], info), {})
    restarted = read_rows([answer([packed("a:1", up=1, resets=1)])], info)
    assert stale(info, restarted, {r.replica: r.figures.get("resets") for r in rows})
    assert not stale(info, restarted, {"a:1": 1.0})  # the same restart, still in window


def test_answers_survive_a_recording_round_trip() -> None:
    info = read_info(INFO)
    rows = read_rows([answer(ROWS)], info) + read_rows([answer(ENGINES)], info, by_engine=True)
    raw = RawPoll(time=1.0, prometheus=PromAnswers("http://prom", tuple(rows), {"itl": 0.01}))
    back = RawPoll.from_dict(json.loads(json.dumps(raw.to_dict())))
    assert back == raw
    assert prometheus_replicas(back) == prometheus_replicas(raw)
    assert prometheus_replicas(RawPoll(time=1.0)) == []


def serve(asked: list[str], answers: dict[str, list[dict[str, Any]]]) -> Fetch:
    """A Prometheus that answers each kind of query (info, replicas, engines) from `answers`,
    a packed one with the figures its query joins, in its order."""

    async def reply(endpoint: str, query: str) -> tuple[int, bytes]:
        assert endpoint == "http://prom:9090/api/v1/query"
        kind = "info" if 'llmtop_figure"' in query else "engines"
        kind = "replicas" if query.startswith("max by (instance, llmtop_figures)") else kind
        asked.append(kind)
        result = answers[kind] if kind == "info" else answer(answers[kind], names_of(query))[1]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, json.dumps(body).encode()

    return reply


def test_a_series_that_is_not_a_packed_answer_is_left_out_and_odd_values_are_unknown() -> None:
    names = ("up", "running", "waiting", "kv_usage")
    _, series = answer(
        [
            packed("a:1", up=1, running=2, waiting="+Inf", kv_usage="-Inf"),
            packed("b:1", up=1, running="12abc", waiting=3, kv_usage=""),
        ],
        names,
    )
    series += [
        {"metric": {"instance": "c:1", "llmtop_figures": "1,2"}},  # two values for four names
        {"metric": {"instance": "d:1"}},  # no figures at all
        {"metric": {"llmtop_figures": "1,2,3,4"}},  # no replica
        {"metric": {"instance": "e:1", "llmtop_figures": "1,2,3,-0.5e-3"}},
    ]
    rows = {r.replica: r.figures for r in read_rows([(names, series)], Info())}
    assert rows == {
        "a:1": {"up": 1.0, "running": 2.0, "waiting": None, "kv_usage": None},
        "b:1": {"up": 1.0, "running": None, "waiting": 3.0, "kv_usage": None},
        "e:1": {"up": 1.0, "running": 2.0, "waiting": 3.0, "kv_usage": -0.0005},
    }


def test_the_source_asks_one_query_a_poll_and_the_info_now_and_then() -> None:
    asked: list[str] = []
    now = [0.0]
    answers = {"info": INFO, "replicas": ROWS[:2], "engines": ENGINES}

    def poll(rows: list[dict[str, Any]], after_s: float = 1.0) -> list[str]:
        """What one more poll asked, `after_s` after the previous one, answered `rows`."""
        asked.clear()
        answers["replicas"] = rows
        now[0] += after_s
        seen.append(asyncio.run(source.read()))
        return list(asked)

    seen: list[Any] = []
    fetch = serve(asked, answers)
    source = PrometheusSource("http://prom:9090/", fetch=fetch, clock=lambda: now[0])
    try:
        both = ["replicas", "replicas"]  # the quantiles, and the rest
        assert poll(ROWS[:2]) == ["info", *both]  # the info at the start
        assert poll(ROWS[:2]) == both
        assert poll(ROWS) == [*both, "engines", "engines"]  # c:1 runs two engines: theirs too
        assert {r.name for r in seen[-1]} == {"a:1", "b:1", "c:1", "c:1#0", "c:1#1"}
        new = [*ROWS[:2], packed("d:1", up=1, running=1)]  # a replica the info does not know
        assert poll(new) == [*both, "info"]  # the reasons did not change: not asked again
        assert poll(ROWS[:2], promql.INFO_EVERY_S - 1.0) == both
        assert poll(ROWS[:2]) == ["info", *both]  # a minute after the last info
    finally:
        asyncio.run(source.aclose())


def test_a_server_that_cannot_answer_is_one_down_row_saying_why() -> None:
    async def refuse(endpoint: str, query: str) -> tuple[int, bytes]:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")

    async def not_prometheus(endpoint: str, query: str) -> tuple[int, bytes]:
        return 200, b"<html>Grafana</html>"

    async def refused_query(endpoint: str, query: str) -> tuple[int, bytes]:
        return 400, b'{"status": "error", "error": "parse error at char 3"}'

    async def read(fetch: Fetch) -> list[Any]:
        source = PrometheusSource("http://prom:9090", fetch=fetch)
        try:
            return await source.read()
        finally:
            await source.aclose()

    only_series = {"info": [tagged("model", instance="a:1", model_name="m")], "replicas": []}
    for fetch, why in (
        (serve([], only_series), "matches vLLM series but not their targets' up"),
        (refuse, "cannot connect to http://prom:9090/api/v1/query (connection refused)"),
        (not_prometheus, "did not answer with JSON (HTTP 200; not a Prometheus API?)"),
        (refused_query, "HTTP 400: parse error at char 3"),
    ):
        (row,) = asyncio.run(read(fetch))
        assert row.name == "prometheus"
        assert not row.stats.up
        assert why in (row.stats.error or "")


ENGINE_KINDS = ("sglang", "trtllm", "lmdeploy", "llamacpp", "tgi", "dynamo")


def test_each_engines_queries_parse_in_its_own_names(tmp_path: Path) -> None:
    """Another engine's pair asks its own families (SGLang's ranks kept to 0), leaves out what
    it lacks, and keeps apart the counters a range function reads together."""
    vllm = promql.Queries('job="x"', 30.0)
    queries: dict[str, str] = {"info": vllm.info(ENGINE_KINDS)}
    for kind in ENGINE_KINDS:
        q = promql.Queries('job="x"', 30.0, dialect=kind)
        among = f"and on (instance) {q.carrier()}"
        for i, p in enumerate(q.replicas(q.reasons(("stop",)), among)):
            queries[f"{kind}_{i}"] = p.expr
            assert "vllm:" not in p.expr, kind
            assert promql.LACKS not in p.expr, kind
            assert not re.search(r'rate\(\{__name__=~"[^"]*\|', p.expr), kind
            assert "engines" not in p.names  # its ranks are one engine
    check_promql(queries, tmp_path)
    sglang = queries["sglang_0"]
    assert 'sglang:num_running_reqs{job="x",tp_rank=~"0|"}' in sglang
    assert "kv_capacity" in names_of(sglang)
    assert 'label_replace(count by (instance) (sglang:num_running_reqs{job="x"' in queries["info"]
    assert promql.Queries().info() == promql.Queries().info(())  # vLLM's alone: as before


def test_a_replica_of_another_engine_is_read_as_that_engine() -> None:
    info = read_info(
        [
            *(tagged("replica", instance=r) for r in ("v:1", "s:1")),
            tagged("cache_config", instance="v:1", num_gpu_blocks="32", block_size="16"),
            tagged("kind", instance="s:1", llmtop_engine_kind="sglang"),
            tagged("model", instance="s:1", model_name="m"),
        ]
    )
    assert info.kinds == {"s:1": "sglang"}
    q = promql.Queries(dialect="sglang")
    reasons = q.reasons(info.reasons)
    assert reasons == ("stop", "abort")
    sglang = [packed("s:1", up=1, running=3, kv_usage=0.5, kv_capacity=8192, finished_1=0.5)]
    vllm = [packed("v:1", up=1, running=2)]
    rows = read_rows([answer(vllm)], info) + read_rows(
        [answer(sglang)], info, reasons=reasons, kind="sglang"
    )
    raw = RawPoll(time=1.0, prometheus=PromAnswers("http://prom", tuple(rows)))
    back = RawPoll.from_dict(json.loads(json.dumps(raw.to_dict())))  # a recording keeps it
    stats = {r.name: r.stats for r in prometheus_replicas(back)}
    assert stats["s:1"].engine == "sglang"
    assert stats["s:1"].kv_capacity_tokens == 8192  # its token pool
    assert stats["s:1"].kv_block_size == 1
    assert stats["s:1"].finished_per_s == {"abort": 0.5}
    assert stats["s:1"].model == "m"
    assert stats["v:1"].engine == "vllm"
    assert stats["v:1"].kv_capacity_tokens == 512


def test_a_mixed_fleet_is_asked_one_pair_per_engine_each_over_its_replicas(
    tmp_path: Path,
) -> None:
    """The info names the engines; then each engine's pair, at once, over its own replicas: a
    replica exporting two engines' families is read as the first (vLLM before SGLang before
    Dynamo), as a direct scrape reads it."""
    info = [
        *(tagged("replica", instance=r) for r in ("v:1", "s:1", "d:1", "vs:1", "sd:1")),
        *(tagged("kind", instance=r, llmtop_engine_kind="vllm") for r in ("v:1", "vs:1")),
        *(tagged("kind", instance=r, llmtop_engine_kind="sglang") for r in ("s:1", "vs:1", "sd:1")),
        *(tagged("kind", instance=r, llmtop_engine_kind="dynamo") for r in ("d:1", "sd:1")),
    ]
    assert read_info(info).kinds == {"s:1": "sglang", "d:1": "dynamo", "sd:1": "sglang"}
    asked: list[str] = []

    async def reply(endpoint: str, query: str) -> tuple[int, bytes]:
        asked.append(query)
        result = info if 'llmtop_figure"' in query else []
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, json.dumps(body).encode()

    source = PrometheusSource("http://prom:9090/", selector='{job="x"}', fetch=reply)
    try:
        asyncio.run(source.read())
    finally:
        asyncio.run(source.aclose())
    assert len(asked) == 1 + 3 * 2  # the info, then vLLM's, SGLang's and Dynamo's pairs
    check_promql({f"q{i}": q for i, q in enumerate(asked)}, tmp_path)
    sglang = [q for q in asked[1:] if "sglang:num_running_reqs" in q and "dynamo_" not in q]
    assert sglang
    assert all("unless on (instance) (count by (instance) (vllm:" in q for q in sglang)
    dynamo = [q for q in asked[1:] if q.count("dynamo_frontend_inflight_requests") > 1]
    assert all("sglang:num_running_reqs" in q for q in dynamo)  # not SGLang's replicas
