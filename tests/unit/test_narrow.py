"""Narrow scrapes' pure parts: the query, the candidate URLs, the series check, the probe clock."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from llmtop.core.base.raw import Sample
from llmtop.core.exposition import narrow


def test_query_names_every_sample_once_in_a_stable_order() -> None:
    q = narrow.query(["vllm:b_sum", "vllm:a_total", "vllm:b_sum"])
    assert parse_qs(q) == {"name[]": ["vllm:a_total", "vllm:b_sum"]}
    assert q == narrow.query(["vllm:a_total", "vllm:b_sum"])


def test_candidates_try_the_path_as_given_then_vllms_mount() -> None:
    q = narrow.query(["vllm:a_total"])
    first, second = narrow.candidates("http://h:8000/metrics", q)
    assert urlsplit(first).path == "/metrics"
    assert urlsplit(second).path == "/metrics/"
    assert urlsplit(first).query == urlsplit(second).query == q
    assert narrow.candidates("http://h:8000/metrics/", q) == (f"http://h:8000/metrics/?{q}",)


def test_a_url_with_its_own_query_is_not_narrowed() -> None:
    assert narrow.candidates("http://h:8000/metrics?x=1", narrow.query(["a"])) == ()


def test_same_series_compares_names_and_labels_not_values() -> None:
    full = (Sample("a", (("engine", "0"),), 1.0), Sample("b", (), 2.0))
    assert narrow.same_series(full, (Sample("b", (), 5.0), Sample("a", (("engine", "0"),), 3.0)))
    assert not narrow.same_series(full, full[:1])
    assert not narrow.same_series(full, (full[0], Sample("b", (("engine", "1"),), 2.0)))


def test_a_target_is_probed_with_its_first_full_scrape_and_then_every_reprobe_s() -> None:
    state = narrow.Narrowing()
    assert state.use(0.0) is None
    assert state.due(0.0)
    state.found("http://h/metrics/?q", 100.0)
    assert state.use(100.0 + narrow.REPROBE_S - 1) == "http://h/metrics/?q"
    assert not state.due(100.0 + narrow.REPROBE_S - 1)
    # checked again: a full scrape and a probe, though it narrowed
    assert state.use(100.0 + narrow.REPROBE_S) is None
    assert state.due(100.0 + narrow.REPROBE_S)


def test_a_target_that_did_not_narrow_waits_before_the_next_probe() -> None:
    state = narrow.Narrowing()
    state.found(None, 50.0)
    assert state.use(51.0) is None
    assert not state.due(51.0)
    assert state.due(50.0 + narrow.REPROBE_S)


def test_a_failed_narrow_url_goes_back_to_full_until_the_next_probe() -> None:
    state = narrow.Narrowing()
    state.found("http://h/metrics/?q", 0.0)
    state.failed(10.0)
    assert state.use(11.0) is None
    assert not state.due(11.0)
    assert state.due(10.0 + narrow.REPROBE_S)


def test_a_narrow_answer_must_be_clearly_smaller_than_the_full_one() -> None:
    # a full text's length varies with its values: a query ignored comes back about as long
    assert not narrow.worth(53_000, 52_990)
    assert narrow.worth(53_000, 16_000)
