"""core.alerts and `llmtop rules`: one alert per finding PromQL can express, made from the
finding's own definition (its id, class, hold, advice and thresholds: change one and the file
follows), old vLLM names matched, bad input refused in one line with nothing written.
promtool's own checks are in tests/integration/test_alerts_replay.py."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest

from llmtop.cli import main
from llmtop.core.alerts.alert import alert_name
from llmtop.core.alerts.figures import figures
from llmtop.core.alerts.spec import AlertSpec, duration
from llmtop.core.findings.catalog import DEFINITIONS, FLEET_RULES, NOT_EXPRESSED, alerts
from llmtop.core.findings.definition import AlertRule
from llmtop.core.findings.features import SLO_SEVERITY
from llmtop.core.health.thresholds import FleetRules
from llmtop.core.output.rulesfile import render
from llmtop.errors import UsageError
from llmtop.settings import HealthSettings, SloSettings

BRIEF = {
    "degraded-200", "kv-exhausted", "batching-cliff", "decode-bound", "prefill-bound",
    "gateway-saturated", "gateway-queue-over-slo", "target-down", "stats-disabled",
    "scheduler-stuck", "replica-outlier",
}  # fmt: skip
"""The findings issue 29 names (the gateway's queue and 429s are the two gateway ones)."""
TIMING = {"fire_after_s", "clear_after_s", "window_s", "trend_horizon_s"}
"""Settings every alert shares (its hold, its window), not a finding's threshold."""


def by_finding(spec: AlertSpec) -> dict[str, AlertRule]:
    made, _ = alerts(spec)
    return {a.finding: a for a in made}


def test_every_finding_has_an_alert_or_says_why_not() -> None:
    made, left = alerts(AlertSpec(vllm_matchers='job="vllm"'))
    ids = {a.finding for a in made}
    assert ids | set(left) == {d.rule.id for d in DEFINITIONS}
    assert not ids & set(left)
    assert ids >= BRIEF
    assert left == NOT_EXPRESSED
    _, without_selector = alerts(AlertSpec())
    assert set(without_selector) - set(NOT_EXPRESSED) == {"stats-disabled"}
    text = render(AlertSpec())
    for finding, why in without_selector.items():
        assert f"# - {finding}: {why.split()[0]}" in text  # said in the file


def test_labels_holds_and_advice_come_from_the_definitions() -> None:
    text = render(AlertSpec(), dialects=("vllm", "llamacpp"))  # llama.cpp's own in its group
    for d in DEFINITIONS:
        a, r = d.alert_rule(AlertSpec()), d.rule
        if isinstance(a, str):
            continue
        labels = a.labels()
        assert labels["finding"] == a.finding == r.id
        assert a.name == alert_name(r.id)
        assert labels["severity"] in (a.alert.severity, r.severity)
        assert labels.get("bottleneck", "") in (r.bottleneck, "")  # "": named by the expression
        assert a.action == (a.alert.action or d.advice) == (a.alert.action or r.advice)
        assert a.action  # the check's advice, or the alert's own words
        block = text.split(f"      - alert: {a.name}\n", 1)[1].split("      - ", 1)[0]
        assert ("for: 3s" in block) == (not r.immediate)
        assert ("keep_firing_for: 10s" in block) == (not r.immediate)
        for key in ("summary:", "action:", "llmtop:"):
            assert key in block
    assert "llmtop --vllm http://{{ $labels.instance }}" in text


def _moved(name: str) -> tuple[HealthSettings, FleetRules]:
    """The settings with one threshold moved (a fleet one as the fleet's rules see it)."""
    h, f = HealthSettings(), FleetRules.of(HealthSettings())
    if name.startswith("slo."):
        slo = h.slo
        key = name.removeprefix("slo.")
        h = replace(h, slo=replace(slo, **{key: getattr(slo, key) * 1.37}))
    elif hasattr(h, name):
        h = replace(h, **{name: getattr(h, name) * 1.37})
    else:
        return h, replace(f, **{name: getattr(f, name) + 1})
    return h, FleetRules.of(h)


def _made(name: str) -> dict[str, AlertRule]:
    """The alerts with `name` moved ("": none), at an interval that hides no look-back."""
    h, f = _moved(name) if name else (HealthSettings(), FleetRules.of(HealthSettings()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AlertSpec, "fleet_rules", property(lambda _: f))
        return by_finding(AlertSpec(health=h, interval_s=1.0, vllm_matchers='job="vllm"'))


def test_each_alert_moves_with_the_thresholds_its_finding_reads_and_no_other() -> None:
    """A definition's `reads` is its alert's thresholds: moving one of them changes that alert,
    moving any other threshold changes none of it."""
    health = {f.name for f in fields(HealthSettings)} - TIMING - {"slo"}
    names = health | {"slo.ttft_s", "slo.itl_s"}
    names |= {f.name for f in fields(FleetRules)} - TIMING - {"kv_high_frac", "ttft_slo_s"}
    base = _made("")
    for d in DEFINITIONS:
        assert set(d.reads) <= names | {"kv_high_frac", "ttft_slo_s"}, d.rule.id
    moved = {name: _made(name) for name in sorted(names)}
    for d in DEFINITIONS:
        finding = d.rule.id
        if finding not in base:
            continue
        reads = set(d.reads)
        if d.rule in FLEET_RULES:  # the fleet's rules take these two from the health settings
            reads = {
                {"kv_high_frac": "kv_high_frac", "ttft_slo_s": "slo.ttft_s"}.get(r, r)
                for r in reads
            }
        moves = {name for name, made in moved.items() if made[finding] != base[finding]}
        assert moves == reads, finding


def test_kv_exhausted_alerts_by_the_slo() -> None:
    """The severity policy in the rules file: a full cache inside the SLO is info."""
    kv = by_finding(AlertSpec())["kv-exhausted"]
    assert "llmtop:vllm_slo_ratio" in kv.alert.expr
    assert kv.labels()["severity"].startswith("{{ if gt $value 1.0 }}critical")
    assert "{{ else }}info{{ end }}" in kv.labels()["severity"]


def test_field_levels_alert_by_the_slo_with_the_rules_thresholds() -> None:
    """prefix-cache-collapse and spec-decode-low: the rules' thresholds, a look-back before the
    window over the recorded figure, none across a restart, the severity by the SLO."""
    moved = replace(
        HealthSettings(),
        prefix_drop_from_frac=0.4,
        prefix_drop_to_share=0.2,
        prefix_lookback_s=120.0,
        spec_acceptance_low_frac=0.3,
        spec_drop_share=0.6,
    )
    made = by_finding(AlertSpec(health=moved, interval_s=1.0))
    prefix, spec = made["prefix-cache-collapse"].alert, made["spec-decode-low"].alert
    level = "max_over_time(llmtop:vllm_{}[110s] offset 10s) unless on (instance)"
    assert level.format("prefix_cache_hit_frac") in prefix.expr
    assert "(0.2 * (" in prefix.expr
    assert ">= 0.4)" in prefix.expr
    assert level.format("spec_acceptance_frac") in spec.expr
    assert "llmtop:vllm_spec_acceptance_frac < 0.3 or" in spec.expr
    assert "(0.6 * (" in spec.expr
    for a in (prefix, spec):
        assert "resets(vllm:generation_tokens_total[120s])" in a.expr
        assert a.expr.startswith("(max by (instance) (llmtop:vllm_slo_ratio) and on (instance)")
        assert a.severity == SLO_SEVERITY
    names = {r.name for r in figures(AlertSpec(interval_s=1.0))}
    assert {"llmtop:vllm_prefix_cache_hit_frac", "llmtop:vllm_spec_acceptance_frac"} <= names
    sparse = render(AlertSpec(interval_s=15.0))  # four scrapes at least, as every rate
    assert "rate(vllm:spec_decode_num_draft_tokens_total[60s])" in sparse
    assert "rate(vllm:spec_decode_num_draft_tokens_total[4s])" in render(AlertSpec(interval_s=1))


def test_a_changed_threshold_changes_the_rules() -> None:
    moved = replace(
        HealthSettings(),
        slo=SloSettings(ttft_s=3.5, itl_s=0.25),
        kv_high_frac=0.85,
        kv_target_frac=0.8,
        scheduler_stuck_after_s=20.0,
        fire_after_s=5.0,
        clear_after_s=30.0,
    )
    before, after = render(AlertSpec()), render(AlertSpec(health=moved))
    assert "llmtop:vllm_ttft_p95_seconds / 3.5" in after
    assert "llmtop:vllm_itl_p95_seconds > 0.25" in after
    assert "llmtop:vllm_kv_usage_peak_frac >= 0.85" in after
    assert "llmtop:vllm_kv_capacity_tokens * 0.8" in after
    assert "llmtop:vllm_tokens_total offset 20s == 0" in after
    assert "max by (instance) (llmtop_gateway_oldest_queued_seconds) > 3.5" in after
    assert "for: 5s" in after
    assert "keep_firing_for: 30s" in after
    for text in ("/ 3.5", ">= 0.85", "offset 20s", "for: 5s"):
        assert text not in before


def test_old_vllm_names_are_matched_too() -> None:
    text = render(AlertSpec())
    assert "(vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)" in text
    assert "vllm:inter_token_latency_seconds_bucket[15s" not in text  # the window is 60 s here
    assert re.search(
        r"rate\(vllm:inter_token_latency_seconds_bucket\[60s\]\) or "
        r"rate\(vllm:time_per_output_token_seconds_bucket\[60s\]\)",
        text,
    )


def test_windows_follow_the_interval_and_selectors_go_into_every_series() -> None:
    spec = AlertSpec(
        vllm_matchers='job="vllm",namespace="ml"',
        gateway_matchers='job="gw"',
        replica_label="pod",
        interval_s=30.0,
    )
    text = render(spec)
    assert "    interval: 30s" in text
    assert spec.window_s == 120.0
    assert "[120s]" in text
    assert 'vllm:num_requests_running{job="vllm",namespace="ml"}' in text
    assert 'llmtop_gateway_oldest_queued_seconds{job="gw"}' in text
    assert "sum by (pod)" in text
    assert "sum by (instance)" not in text
    opens = by_finding(spec)["kv-exhausted"].alert.llmtop
    assert opens == (
        "llmtop --prometheus {{ externalURL }} "
        '--selector \'{job="vllm",namespace="ml",pod="{{ $labels.pod }}"}\''
    )
    assert AlertSpec(interval_s=1).window_s == HealthSettings().window_s
    # the same figures; a gateway's engines are joined by instance only (its replica URLs)
    by_instance = [f.name for f in figures(AlertSpec())]
    assert by_instance[0] == "llmtop:gateway_upstream"
    assert [f.name for f in figures(spec)] == by_instance[1:]


def test_durations() -> None:
    assert duration(10.0) == "10s"
    assert duration(1.5) == "1500ms"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--vllm-selector", "job=vllm"], "--vllm-selector 'job=vllm' is not a PromQL selector"),
        (["--gateway-selector", '{job="gw"'], "--gateway-selector '{job=\"gw\"' is not a PromQL"),
        (["--replica-label", "le"], "--replica-label 'le': llmtop uses that name"),
        (["--replica-label", "9pod"], "--replica-label '9pod' is not a Prometheus label name"),
        (["--interval-s", "0"], "--interval-s must be between 0.1 and 3600 seconds, got 0"),
        (["--ttft-slo-s", "fast"], "argument --ttft-slo-s: invalid float value: 'fast'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "llmtop.rules.yml"
    out.write_text("the old file\n")
    try:
        code = main(["rules", *args, "--out", str(out)])
    except SystemExit as e:  # argparse's own refusals
        code = int(e.code or 0)
    assert code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert said in lines[0]
    assert captured.out == ""
    assert out.read_text() == "the old file\n"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_out_replaces_the_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "llmtop.rules.yml"
    out.write_text("the old file\n")
    assert main(["rules", "--interval-s", "1", "--out", str(out)]) == 0
    assert out.read_text() == render(AlertSpec(interval_s=1.0))
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left


def test_settings_reach_the_file_through_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLMTOP_TTFT_SLO_S", "3.5")
    monkeypatch.setenv("LLMTOP_SCHEDULER_STUCK_AFTER_S", "20")
    assert main(["rules"]) == 0
    text = capsys.readouterr().out
    assert text == render(
        AlertSpec(
            health=replace(
                HealthSettings(), slo=SloSettings(ttft_s=3.5), scheduler_stuck_after_s=20
            )
        )
    )
    assert "> 3.5" in text


def test_a_spec_refuses_a_bad_label_itself() -> None:
    with pytest.raises(UsageError, match="--replica-label"):
        AlertSpec(replica_label="__name__")
