"""Alert rules per engine (issue 44.5): `llmtop rules --dialect X` read by `promtool test rules`
against each engine's own series, with llmtop's verdict on the same samples.

The inputs: the real llama.cpp recordings (a burst behind its 2 slots, a healthy run), and vLLM
incidents of the library spoken in each other engine's names (`speak`, the sim's `--dialect`:
the same inversion), so the samples Prometheus reads are the engine's own families, labels and
histogram suffixes. As in test_alerts_replay.py, llmtop's pipeline judges the grid and promtool
must fire each of the group's alerts exactly where llmtop's finding holds; `COMPARED` says what
each input makes llmtop say (at least one alert on an incident, none on a healthy run), and
every dialect's file passes `promtool check rules`.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.base.raw import RawPoll
from llmtop.core.dialects.engines import BY_KIND, DIALECTS
from llmtop.core.dialects.speak import speaker
from llmtop.core.health.thresholds import HealthSettings
from llmtop.core.output.rulesfile import group, render
from llmtop.recording.reader import read_recording
from tests.support import alert_replay as ar
from tests.support.paths import FIXTURES
from tests.support.promtool import promtool

pytestmark = [pytest.mark.slow(2), pytest.mark.timeout(300)]

INTERVAL_S = 1.0
KIND_CLIFF = {"LlmtopBatchingCliff": ""}
INCIDENT = "incidents/kv-exhausted.jsonl.gz"
IDLE = "incidents/healthy-idle.jsonl.gz"

COMPARED: dict[tuple[str, str], dict[str, str]] = {
    # (engine, recording) -> alert -> "" compared, or why not
    ("llamacpp", "incidents/real-llamacpp-burst.jsonl.gz"): {"LlmtopQueueWaitEstimated": ""},
    ("llamacpp", "incidents/real-llamacpp-healthy.jsonl.gz"): {},
    # the library's KV exhaustion spoken by each engine: what its dialect can say of it
    ("sglang", INCIDENT): {"LlmtopKvExhausted": "", "LlmtopDegraded200": "", **KIND_CLIFF},
    ("trtllm", INCIDENT): {"LlmtopKvExhausted": "", "LlmtopDegraded200": ""},
    ("lmdeploy", INCIDENT): {"LlmtopKvExhausted": "", "LlmtopDegraded200": "", **KIND_CLIFF},
    # a bare frontend exports no KV usage (its workers do): kv-exhausted not judged there
    ("dynamo", INCIDENT): {"LlmtopDegraded200": "", **KIND_CLIFF},
    ("tgi", INCIDENT): KIND_CLIFF,  # no KV figure, no TTFT: the queue's cliff is what it says
    ("llamacpp", INCIDENT): KIND_CLIFF,
    **{(d.kind, IDLE): {} for d in DIALECTS if d.kind != "vllm"},
}


def spoken(polls: list[RawPoll], kind: str) -> list[RawPoll]:
    """vLLM's polls in `kind`'s own names (a recording of that engine is left as it is)."""
    s = speaker(BY_KIND[kind])
    out = []
    for p in polls:
        engines = []
        for e in p.engines:
            own = e.samples is not None and any(
                x.name.startswith(BY_KIND[kind].prefix) for x in e.samples
            )
            samples = e.samples if e.samples is None or own else s.speak(e.samples)
            engines.append(replace(e, samples=samples))
        out.append(replace(p, engines=tuple(engines)))
    return out


def check(kind: str, name: str, compared: dict[str, str], tmp_path: Path) -> None:
    """Replay `name` spoken by `kind` through llmtop and through promtool with `kind`'s rules."""
    tool = promtool()
    health = HealthSettings()
    spec = AlertSpec(health=health, interval_s=INTERVAL_S, dialect=kind)
    rules = tmp_path / "rules.yml"
    rules.write_text(render(spec, dialects=[kind]))
    polls = ar.grid(spoken(list(read_recording(FIXTURES / name)), kind))
    seconds = len(polls)
    ours = ar.llmtop_spans(polls, health)
    found = {n for n, _ in ours}
    assert found == set(compared), f"{kind} {name}: llmtop finds {sorted(found)}"
    made = group(spec).alerts
    names = [a.name for a in made]
    assert set(compared) <= set(names), f"{kind}'s rules lack {set(compared) - set(names)}"
    tolerance = {
        a.name: int(INTERVAL_S) + (0 if a.immediate else int(health.fire_after_s)) for a in made
    }
    instances = sorted({k[1] for k in ours} | {None}, key=lambda i: i or "")
    skipped = {(n, i) for n, why in compared.items() if why for i in instances}
    series = ar.input_series(polls)
    assert any(s["series"].startswith(BY_KIND[kind].prefix) for s in series)
    assert not any(s["series"].startswith("vllm:") for s in series)
    tests = ar.assertions(ours, names, instances, tolerance, seconds, skipped)
    test_file = ar.write_assertions(rules, series, tests, tmp_path / "agree.test.json")
    done = ar.run_promtool(tool, test_file)
    if done.returncode != 0:
        theirs = ar.prometheus_spans(tool, rules, series, seconds, tmp_path)
        expected = {k: compared.get(k[0], "?") for k in ours}
        rows = ar.compare(ours, theirs, tolerance, seconds, expected)
        failed = (done.stdout + done.stderr)[-3000:]
        pytest.fail(f"promtool disagrees with llmtop:\n{ar.table(name, rows)}\n{failed}")


@pytest.mark.parametrize(
    ("kind", "name"), sorted(COMPARED), ids=[f"{k}-{Path(n).stem}" for k, n in sorted(COMPARED)]
)
def test_each_engines_alerts_fire_where_llmtop_findings_do(
    kind: str, name: str, tmp_path: Path
) -> None:
    check(kind, name, COMPARED[(kind, name)], tmp_path)


def test_every_incident_fires_an_alert_and_every_idle_run_none() -> None:
    """The table holds, per engine, an input that alerts and a healthy one that does not."""
    for d in DIALECTS:
        if d.kind == "vllm":
            continue  # test_alerts_replay.py
        rows = {n: c for (k, n), c in COMPARED.items() if k == d.kind}
        assert any(rows.values()), f"{d.kind}: no incident"
        assert any(not c for c in rows.values()), f"{d.kind}: no healthy run"


@pytest.mark.parametrize("dialects", [[d.kind] for d in DIALECTS] + [["all"]], ids=str)
def test_promtool_checks_each_engines_rules_clean(dialects: list[str], tmp_path: Path) -> None:
    from llmtop.core.output.rulesfile import dialects as parse

    kinds = parse(",".join(dialects))
    path = tmp_path / "llmtop.rules.yml"
    spec = AlertSpec(vllm_matchers='job="engines"', interval_s=15.0)
    path.write_text(render(spec, dialects=kinds))
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    count = 0
    for i, k in enumerate(kinds):
        g = group(
            replace(spec, dialect=k, beside=kinds[1:] if i == 0 else (), gateway_part=i == 0),
            len(kinds) > 1,
        )
        count += len(g.records) + len(g.alerts)
    assert f"SUCCESS: {count} rules found" in done.stdout
