"""Same verdict as llmtop: the recorded incidents replayed through `promtool test rules` with
the rules `llmtop rules` makes, against llmtop's own findings on the same samples.

Each recording (the demo story, its older recording, the gateway's queue of issue 28.3, the
three-sim fleet, and the real vLLM captures, 0.32 and 0.10.1 V0, as a burst held then eased) is
put on a one-second grid; llmtop's pipeline judges the grid, and its findings' spans become
promtool assertions: at every second farther than the alert's tolerance (one evaluation
interval plus its `for:`) from one of llmtop's edges, the alert fires exactly where the finding
holds, on the same target, and no other alert fires. `COMPARED` is the table of what each
recording makes llmtop say: a rule change that makes llmtop say something else, or Prometheus
disagree, fails here. On failure the two timelines are printed side by side.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llmtop.core.alerts.alert import alert_name
from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.slo import SloSettings
from llmtop.core.exposition import promtext
from llmtop.core.findings.catalog import NOT_EXPRESSED, alerts
from llmtop.core.health.thresholds import HealthSettings
from llmtop.core.output.rulesfile import group, render
from llmtop.core.vllm.names import sample_names
from llmtop.recording.reader import read_recording
from tests.support import alert_replay as ar
from tests.support.paths import FIXTURES
from tests.support.promtool import promtool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INTERVAL_S = 1.0
"""The evaluation interval the rules are made for here: llmtop's poll."""
NO_HISTOGRAM = "the recording keeps the gateway's queue-wait p95, not its buckets"

COMPARED: dict[str, dict[str, str]] = {
    # recording -> alert ("name" or "name [instance]" on a fleet) -> "" compared, or why not
    "demo-story.jsonl.gz": {
        "LlmtopKvExhausted": "",
        "LlmtopDegraded200": "",
        "LlmtopBatchingCliff": "",
        "LlmtopPrefillBound": "",
        "LlmtopGatewaySaturated": NO_HISTOGRAM,
    },
    "recording-story.jsonl.gz": {
        "LlmtopKvExhausted": "",
        "LlmtopDegraded200": "",
        "LlmtopDecodeBound": "",
        "LlmtopTargetDown": "",
        "LlmtopGatewayDown": "",
        "LlmtopGatewaySaturated": NO_HISTOGRAM,
    },
    # issue 28.3 (scripts/record-gateway-queue): the seed sim at cap 2, 16 long prompts at
    # once, the cap raised to 16 at +12 s; 16 running then share each decode step
    "gateway-queue.jsonl.gz": {
        "LlmtopGatewayQueueOverSlo": "",
        "LlmtopDecodeBound": "",
        "LlmtopDegraded200": "",
        "LlmtopGatewaySaturated": NO_HISTOGRAM,
    },
    "fleet-3-sims.jsonl.gz": {
        "LlmtopKvExhausted [127.0.0.1:48475]": "",
        "LlmtopDegraded200 [127.0.0.1:48475]": "",
        "LlmtopReplicaOutlier": "",
        "LlmtopLoadImbalance": "",
    },
    # the burst held: its counters stand still while requests run, so stale-data holds too
    # (the 0.32 burst's first tokens came fast: its TTFT p95 over the jump is 96 ms)
    "vllm-0.32 capture": {"LlmtopKvExhausted": "", "LlmtopStaleData": ""},
    "vllm-0.10.1-v0 capture": {
        "LlmtopKvExhausted": "",
        "LlmtopDegraded200": "",
        "LlmtopStaleData": "",
    },
    # the field guide's incident library (tests/fixtures/incidents/, manifest.json)
    "incidents/engine-unhealthy.jsonl.gz": {"LlmtopEngineUnhealthy": ""},
    "incidents/engine-asleep.jsonl.gz": {"LlmtopEngineAsleep": "", "LlmtopSchedulerStuck": ""},
    "incidents/requests-corrupted.jsonl.gz": {"LlmtopRequestsCorrupted": ""},
    "incidents/kv-transfer-failing.jsonl.gz": {"LlmtopKvTransferFailing": ""},
    "incidents/engine-restarted.jsonl.gz": {"LlmtopEngineRestarted": ""},
    "incidents/prefix-cache-collapse.jsonl.gz": {"LlmtopPrefixCacheCollapse": ""},
    "incidents/real-prefix-cache-collapse.jsonl.gz": {"LlmtopPrefixCacheCollapse": ""},
    "incidents/spec-decode-low.jsonl.gz": {"LlmtopSpecDecodeLow": ""},
    # sampled requests after greedy ones: their long prompts also stall the decoders a while
    "incidents/real-spec-decode-low.jsonl.gz": {
        "LlmtopSpecDecodeLow": "",
        "LlmtopDecodeStall": NOT_EXPRESSED["decode-stall"],
    },
    # healthy runs: no alert may fire
    "incidents/healthy-low-prefix-hits.jsonl.gz": {},
    "incidents/healthy-spec-steady.jsonl.gz": {},
    "incidents/real-healthy-spec-steady.jsonl.gz": {},
}
"""What llmtop finds in each recorded incident, and whether Prometheus is held to it."""


def _capture(idle: str, load: str) -> list[RawPoll]:
    """A real capture as an incident: idle 20 s, the burst held 40 s, then 40 s of the burst's
    counters with the idle gauges (the queue gone, KV free): the finding must clear."""
    keep = promtext.keep_names(sample_names())
    before = promtext.parse((FIXTURES / idle).read_text(), keep)
    during = promtext.parse((FIXTURES / load).read_text(), keep)
    gauges = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}
    gauges |= {"vllm:gpu_cache_usage_perc", "vllm:num_requests_waiting_by_reason"}
    idle_gauges = {(s.name, s.labels): s.value for s in before if s.name in gauges}
    after = tuple(
        s._replace(value=idle_gauges.get((s.name, s.labels), 0.0)) if s.name in gauges else s
        for s in during
    )
    url = "http://127.0.0.1:8000"
    return [
        RawPoll(time=1.0e9 + k, engines=(RawEngine(url, samples),))
        for k, samples in enumerate([before] * 20 + [during] * 40 + [after] * 40)
    ]


def polls_of(name: str) -> list[RawPoll]:
    if name == "vllm-0.32 capture":
        return _capture("metrics-idle.txt", "metrics-load.txt")
    if name == "vllm-0.10.1-v0 capture":
        return _capture("metrics-vllm-0.10.1-v0-idle.txt", "metrics-vllm-0.10.1-v0-load.txt")
    return list(read_recording(FIXTURES / name))


def _key(text: str) -> ar.Key:
    name, _, rest = text.partition(" [")
    return (name, rest.rstrip("]") or None)


def check(name: str, health: HealthSettings, tmp_path: Path, compared: dict[str, str]) -> None:
    """Replay `name` through both, assert llmtop finds what the table says and promtool agrees."""
    tool = promtool()
    spec = AlertSpec(health=health, interval_s=INTERVAL_S)
    rules = tmp_path / "rules.yml"
    rules.write_text(render(spec))
    polls = ar.grid(polls_of(name))
    seconds = len(polls)
    ours = ar.llmtop_spans(polls, health)
    table = {_key(k): why for k, why in compared.items()}
    # an alert named alone in the table is on the recording's one engine (or gateway)
    expected = {k: table.get(k, table.get((k[0], None), "?")) for k in ours}
    found = {(n, i) if (n, i) in table else (n, None) for n, i in ours}
    assert found == set(table), (
        f"{name}: llmtop's findings are not the table's: found {sorted(ours, key=str)}, "
        f"the table lists {sorted(table, key=str)}"
    )
    made, _ = alerts(spec)
    tolerance = {
        a.name: int(INTERVAL_S) + (0 if a.immediate else int(health.fire_after_s)) for a in made
    }
    instances = sorted({k[1] for k in ours} | {None}, key=lambda i: i or "")
    series = ar.input_series(polls)
    skipped = {k for k, why in expected.items() if why}
    skipped |= {(n, i) for n, _ in skipped for i in instances}
    tests = ar.assertions(ours, [a.name for a in made], instances, tolerance, seconds, skipped)
    test_file = ar.write_assertions(rules, series, tests, tmp_path / "agree.test.json")
    done = ar.run_promtool(tool, test_file)
    if done.returncode != 0:
        theirs = ar.prometheus_spans(tool, rules, series, seconds, tmp_path)
        rows = ar.compare(ours, theirs, tolerance, seconds, expected)
        failed = (done.stdout + done.stderr)[-3000:]
        pytest.fail(f"promtool disagrees with llmtop:\n{ar.table(name, rows)}\n{failed}")


@pytest.mark.parametrize("name", sorted(COMPARED))
def test_alerts_fire_and_resolve_where_llmtop_findings_do(name: str, tmp_path: Path) -> None:
    check(name, HealthSettings(), tmp_path, COMPARED[name])


def test_a_changed_threshold_moves_both(tmp_path: Path) -> None:
    """The same burst with the SLOs, the KV mark and the hang's threshold moved out of its
    reach: llmtop finds nothing, and the rules made from the same settings say nothing."""
    relaxed = replace(
        HealthSettings(),
        slo=SloSettings(ttft_s=120.0, itl_s=10.0),
        kv_high_frac=1.01,
        stale_after_s=60.0,
    )
    check("vllm-0.32 capture", relaxed, tmp_path, {})


def test_every_alert_name_is_a_finding() -> None:
    """The table names alerts by their finding's id (`alert_name`), so each maps back (an
    alert not made only for a finding `NOT_EXPRESSED` names)."""
    made, _ = alerts(AlertSpec())
    names = {alert_name(a.finding) for a in made} | {alert_name(f) for f in NOT_EXPRESSED}
    for compared in COMPARED.values():
        assert {_key(k)[0] for k in compared} <= names


@pytest.mark.parametrize(
    "spec",
    [
        AlertSpec(),
        AlertSpec(interval_s=1.0),
        AlertSpec(
            vllm_matchers='job="vllm",namespace=~"ml|llm"',
            gateway_matchers='job="llmtop-gateway"',
            replica_label="pod",
            interval_s=30.0,
        ),
    ],
    ids=["defaults", "1s", "selectors-pod-30s"],
)
def test_promtool_checks_the_rules_clean(spec: AlertSpec, tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "llmtop.rules.yml"
    path.write_text(render(spec))
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    made = group(spec)  # vLLM's group: the alerts of its findings, its recorded figures
    assert f"SUCCESS: {len(made.alerts) + len(made.records)} rules found" in done.stdout


def test_field_levels_warn_when_latency_is_unknown_and_skip_a_restart(tmp_path: Path) -> None:
    """Counters alone (no latency histograms: the SLO unknown, so warning, as llmtop's policy):
    a: hit rate 90 % -> 3 % at 60 s; b: the same, its tokens counter reset at 70 s (no level
    across a restart); c: acceptance 80 % -> 35 % (under half its level, above the floor);
    d: the same with a restart. Only a's collapse and c's fall alert."""
    steady = "0+10x120"
    restarted = "0+10x69 0+10x50"

    def engine(inst: str, tokens: str) -> list[tuple[str, str]]:
        return [(f'vllm:generation_tokens_total{{instance="{inst}"}}', tokens)]

    rows = [
        *engine("a", steady),
        *engine("b", restarted),
        *engine("c", steady),
        *engine("d", restarted),
    ]
    for inst in ("a", "b"):
        rows += [
            (f'vllm:prefix_cache_queries_total{{instance="{inst}"}}', "0+100x120"),
            (f'vllm:prefix_cache_hits_total{{instance="{inst}"}}', "0+90x60 5403+3x59"),
        ]
    for inst in ("c", "d"):
        rows += [
            (f'vllm:spec_decode_num_drafts_total{{instance="{inst}"}}', "0+10x120"),
            (f'vllm:spec_decode_num_draft_tokens_total{{instance="{inst}"}}', "0+30x120"),
            (
                f'vllm:spec_decode_num_accepted_tokens_total{{instance="{inst}"}}',
                "0+24x60 1450+10.5x59",
            ),
        ]
    rules = tmp_path / "rules.yml"
    rules.write_text(render(AlertSpec(interval_s=INTERVAL_S)))

    def alert(name: str, finding: str, bottleneck: str, inst: str) -> dict[str, str | float]:
        labels = (
            f'{{__name__="ALERTS",alertname="{name}",alertstate="firing",'
            f'bottleneck="{bottleneck}",finding="{finding}",instance="{inst}",severity="warning"}}'
        )
        return {"labels": labels, "value": 1.0}

    ours = 'ALERTS{alertstate="firing",alertname=~"LlmtopPrefixCacheCollapse|LlmtopSpecDecodeLow"}'
    tests = [
        {"expr": ours, "eval_time": "50s", "exp_samples": []},
        {
            "expr": ours,
            "eval_time": "100s",
            "exp_samples": [
                alert("LlmtopPrefixCacheCollapse", "prefix-cache-collapse", "prefill", "a"),
                alert("LlmtopSpecDecodeLow", "spec-decode-low", "decode", "c"),
            ],
        },
    ]
    series = [{"series": s, "values": v} for s, v in rows]
    test_file = ar.write_assertions(rules, series, tests, tmp_path / "field.test.json")
    done = ar.run_promtool(promtool(), test_file)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_field_levels_summaries_carry_the_numbers(tmp_path: Path) -> None:
    """The page says what llmtop's finding says: the level, the value now, the cost."""
    import json

    made = {a.finding: a for a in alerts(AlertSpec(interval_s=INTERVAL_S))[0]}
    rules = tmp_path / "rules.yml"
    rules.write_text(render(AlertSpec(interval_s=INTERVAL_S)))
    rows = {
        "generation_tokens_total": "0+10x120",
        "prompt_tokens_total": "0+10x120",
        "prefix_cache_queries_total": "0+100x120",
        "prefix_cache_hits_total": "0+90x60 5403+3x59",
        "spec_decode_num_drafts_total": "0+10x120",
        "spec_decode_num_draft_tokens_total": "0+30x120",
        "spec_decode_num_accepted_tokens_total": "0+24x60 1450+3x59",
    }
    series = [{"series": f'vllm:{n}{{instance="a"}}', "values": v} for n, v in rows.items()]
    summaries = {
        "prefix-cache-collapse": "a: prefix cache hit rate 90% -> 3% within 60s: prompt tokens "
        "computed per request 9.70x (10.0 prompt tokens/s)",
        "spec-decode-low": "a: speculative decoding accepts 10% of draft tokens (its highest "
        "within 60s: 80%)",
    }
    tests = []
    for finding, summary in summaries.items():
        a = made[finding]
        labels = {**a.labels(), "instance": "a", "severity": "warning"}
        notes = {"summary": summary, "action": a.action, "llmtop": "llmtop --vllm http://a"}
        tests.append(
            {
                "eval_time": "100s",
                "alertname": a.name,
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": notes}],
            }
        )
    doc = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1s",
        "tests": [{"interval": "1s", "input_series": series, "alert_rule_test": tests}],
    }
    path = tmp_path / "summaries.test.json"
    path.write_text(json.dumps(doc))
    done = ar.run_promtool(promtool(), path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
