"""`llmtop rules --dialect`: each engine's group in its own metric names, what it lacks left out
with the reason `snapshot --json` gives, the gateway's rules once, vLLM's file unchanged.
promtool's verdicts are in tests/integration/test_alerts_dialects.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmtop.cli import main
from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.dialects.catalog import lacking
from llmtop.core.dialects.engines import BY_KIND, DIALECTS
from llmtop.core.findings.catalog import DEFINITIONS, NOT_EXPRESSED
from llmtop.core.output.rulesfile import dialects, group, render
from llmtop.core.promql.promql import LACKS, Queries
from llmtop.errors import UsageError

OTHERS = [d.kind for d in DIALECTS if d.kind != "vllm"]
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def rules_text(text: str) -> str:
    """The file without its comments: what Prometheus reads."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_vllm_alone_is_the_file_it_always_was(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    plain = capsys.readouterr().out
    assert main(["rules", "--dialect", "vllm"]) == 0
    assert capsys.readouterr().out == plain == render(AlertSpec())
    assert "engine:" not in plain
    assert "  - name: llmtop\n" in plain


@pytest.mark.parametrize("kind", OTHERS)
def test_each_engine_is_asked_in_its_own_names(kind: str) -> None:
    text = rules_text(render(AlertSpec(vllm_matchers='job="x"'), dialects=[kind]))
    assert f"  - name: llmtop-{kind}\n" in text
    assert "vllm:" not in text  # no vLLM family read, nor its `vllm:.+` regex
    assert LACKS not in text
    assert "llmtop:vllm_" not in text  # its figures under its own prefix
    assert f"llmtop:{kind}_running" in text
    own = reverse_names(kind)
    assert own & set(NAME.findall(text)), kind
    for alert in re.findall(r"- alert: (\w+)", text):
        assert alert.startswith("Llmtop")
    engines = set(re.findall(r'engine: "(\w+)"', text))
    assert engines == {kind}


def reverse_names(kind: str) -> set[str]:
    from llmtop.core.dialects.reverse import reverse

    r = reverse(kind)
    return {n for names in r.names.values() for n in names} | set(r.finished)


@pytest.mark.parametrize("kind", OTHERS)
def test_a_finding_whose_inputs_the_engine_lacks_is_left_out_saying_why(kind: str) -> None:
    g = group(AlertSpec(dialect=kind))
    made = {a.finding for a in g.alerts}
    for d in DEFINITIONS:
        why = lacking(kind, d.needs) if d.needs else None
        if why is not None and d.rule.id not in NOT_EXPRESSED:
            assert d.rule.id not in made
            assert g.left[d.rule.id] == why  # the reason `snapshot --json` lists
    text = render(AlertSpec(dialect=kind), dialects=[kind])
    for name, why in g.left.items():
        assert f"# - {name}: " in text
        assert why.split()[0] in text


def test_llama_cpp_keeps_its_own_estimate_and_vllm_does_not_get_it() -> None:
    llamacpp = {a.finding for a in group(AlertSpec(dialect="llamacpp")).alerts}
    vllm = {a.finding for a in group(AlertSpec()).alerts}
    assert "queue-wait-estimated" in llamacpp
    assert "queue-wait-estimated" not in vllm
    assert "kv-exhausted" in vllm
    assert "kv-exhausted" not in llamacpp  # no KV usage since its PR #13660
    assert "LlmtopQueueWaitEstimated" not in render(AlertSpec())


def test_sglang_reads_its_ranks_once_and_its_capacity_from_its_pool() -> None:
    text = rules_text(render(AlertSpec(), dialects=["sglang"]))
    assert 'sglang:num_running_reqs{tp_rank=~"0|"}' in text
    assert "sglang:max_total_num_tokens" in text  # the KV capacity, in tokens
    assert "cache_config_info" not in text
    # retractions are its preemptions, under either name it had
    assert "sglang:num_retracted_requests_total" in text
    assert "sglang:total_retracted_reqs" in text


def test_several_engines_one_group_each_the_gateways_rules_once() -> None:
    kinds = dialects("vllm,sglang,llamacpp")
    text = render(AlertSpec(), dialects=kinds)
    names = re.findall(r"^  - name: (\S+)$", text, re.M)
    assert names == ["llmtop", "llmtop-sglang", "llmtop-llamacpp"]
    for once in ("record: llmtop:gateway_upstream", "alert: LlmtopGatewayPaused"):
        assert text.count(once) == 1, once
    # the gateway's figures add up every engine's, each recorded by its own group
    assert "(llmtop:vllm_kv_fits or llmtop:sglang_kv_fits or llmtop:llamacpp_kv_fits)" in text
    # in a file of several, an engine's alerts say which engine
    vllm_group = text.split("  - name: llmtop-sglang")[0]
    assert 'engine: "vllm"' in vllm_group
    paused = text.split("alert: LlmtopGatewayPaused")[1].split("- alert:")[0]
    assert "engine:" not in paused  # the gateway's own: no engine
    # a record is written by one group only
    records = re.findall(r"record: (\S+)", text)
    assert len(records) == len(set(records))


def test_all_names_every_engine_and_bad_names_are_one_line() -> None:
    assert dialects("all") == tuple(d.kind for d in DIALECTS)
    assert dialects(" SGLang , vllm,sglang") == ("sglang", "vllm")
    for bad, said in (("foo", "--dialect 'foo': one of vllm"), (" , ", "--dialect is empty")):
        with pytest.raises(UsageError, match=said):
            dialects(bad)
    with pytest.raises(UsageError, match="--dialect 'nope'"):
        AlertSpec(dialect="nope")


def test_a_bad_dialect_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.yml"
    assert main(["rules", "--dialect", "vllm,ollama", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--dialect 'ollama'" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("kind", OTHERS)
def test_an_engines_counters_added_under_a_range_function_stay_apart(kind: str) -> None:
    """rate() drops the name: two of an engine's counters left with one label set are an
    error, so each is rated apart, kept apart by a label, and then added."""
    q = Queries(dialect=kind)
    for text in q.figures(("instance",), q.reasons(("stop",))).values():
        assert not re.search(r"rate\(\{__name__=~\"[^\"]*\|", text), text


def test_every_engine_is_known_to_the_dialects() -> None:
    assert set(OTHERS) | {"vllm"} == set(BY_KIND)
