"""The sim's /metrics/?name[]= against prometheus_client's own restricted registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmtop.sim.exposition import restrict


def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    g = Gauge("vllm:num_requests_running", "Running.", ["engine"], registry=r)
    g.labels("0").set(3)
    g.labels("1").set(4)
    c = Counter("vllm:prompt_tokens", "Prompt tokens.", registry=r)
    c.inc(120)
    h = Histogram("vllm:ttft_seconds", "TTFT.", buckets=(0.1, 1.0), registry=r)
    h.observe(0.5)
    Gauge("process_open_fds", "Fds.", registry=r).set(9)
    return r


def families(text: str) -> list[str]:
    """The text's family blocks, sorted: the restricted registry's order is a set's."""
    return sorted("# HELP " + block for block in text.split("# HELP ")[1:])


def test_restrict_answers_as_prometheus_clients_restricted_registry() -> None:
    r = registry()
    text = generate_latest(r).decode()
    for names in (
        {"vllm:num_requests_running"},
        {"vllm:prompt_tokens_total", "vllm:ttft_seconds_bucket", "vllm:ttft_seconds_count"},
        {"vllm:ttft_seconds_sum", "process_open_fds", "not_there"},
        {"not_there"},
    ):
        want = generate_latest(r.restricted_registry(names)).decode()
        assert families(restrict(text, names)) == families(want)
    assert restrict(text, {"not_there"}) == ""
