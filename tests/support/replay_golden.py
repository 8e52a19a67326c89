"""The three recorded runs replayed through the pipeline, reduced to a golden that says whether
every figure and finding is still what it was (tests/unit/test_replay_golden.py compares).

What is replayed, each recording in turn (tests/fixtures: demo-story, fleet-3-sims,
recording-story): every poll through `ReplaySource` (the TUI's replay, `llmtop report`'s; the
fleet pipeline for the fleet), the postmortem report built from those snapshots, and
`llmtop snapshot`'s verdict (`verdict.judge_window`) over one-minute windows every 30 polls,
and the recording played three times back to back (`LOOPS`, later plays shifted in time) through a
fresh pipeline: longer than the histories the rules look back over (ten minutes for one engine,
two per replica of a fleet), so the oldest snapshots are let go, and each new play's counters
start from their first values again, as after a restart. Each
result's `repr` (every float in full, every finding worded) is hashed, so one changed bit
anywhere changes a digest: per poll (the first poll that differs is named), per window, for the
report. Beside the digests, a summary to read: the findings as they come and go, with their
words the poll they first hold.

The golden was produced by 31930be's tree, the one before the reader and cost work (issue 30):

    PYTHONPATH=/tmp/orig python tests/support/replay_golden.py --write   # from a directory outside
                                                                 # the tree, with its path

and rewritten once from this tree when the gateway's stats gained `queued_ages_s` (the
gateway-queue-over-slo finding, issue 29): before rewriting, every digest was checked equal to
31930be's with that one new field taken out of the repr, so nothing else had moved; and again
when they gained the SLO's fields (slo_ttft_s, queue_budget_s, engine_ttft_s,
tenant_ttft_slo_s: issue 28) and the prefill budget's (max_unprefilled_prompt_tokens, binding,
binding_reason, unprefilled_prompt_tokens: issue 27), checked the same way: every digest equal
with those fields, all None in these recordings, taken out; and when gateway-down's action
named the gateway's flag by its new name (`--vllm`, was `--upstream`: issue 31), checked equal
with the old name put back; and when EngineStats dropped five figures nothing showed (e2e
p50/p99, queue p99, prefill p95, the KV-transfer share of prompts: issue 36), checked equal
with those fields taken out of the old tree's repr; and when the gateway's stats gained
shared_url and shared_error (the Redis findings: issue 35), checked equal with those two,
None in these recordings, taken out; and when they gained shared_draining_gateways (the
gateway-peer-draining finding: issue 35), checked equal with that one, None in these
recordings, taken out of the repr. And when EngineStats gained `engine` and `engine_note` (the
engines' dialects): every digest checked equal with those two ("vllm" and None in these
recordings) taken out of the repr. And when a fleet's Replica gained `pod` (Kubernetes discovery):
checked equal with `pod=None` taken out of the repr.

After a deliberate change of behaviour, regenerate it from this tree and commit the diff:

    PYTHONPATH=. python tests/support/replay_golden.py --write
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "replay-golden.json"
RECORDINGS = ("demo-story", "fleet-3-sims", "recording-story")
WINDOW_POLLS = 60
WINDOW_EVERY = 30
LOOPS = 3


def _digest(obj: object) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def _findings(snap: Any) -> list[str]:
    """The snapshot's findings as `id severity`, replicas' own too (a fleet's rows)."""
    out = [f"{f.id} {f.severity}" for f in snap.findings]
    fleet = getattr(snap, "fleet", None)
    if fleet is not None:
        for r in fleet.replicas:
            out += [f"{r.name}: {f.id} {f.severity}" for f in r.findings]
    return out


def _words(snap: Any) -> dict[str, str]:
    words = {f"{f.id} {f.severity}": f"{f.summary} | {f.action}" for f in snap.findings}
    fleet = getattr(snap, "fleet", None)
    if fleet is not None:
        for r in fleet.replicas:
            for f in r.findings:
                words[f"{r.name}: {f.id} {f.severity}"] = f"{f.summary} | {f.action}"
    return words


def _first(*homes: str) -> Any:
    """What the first of `module:name` this tree has names (a name moved between trees)."""
    for home in homes:
        module, _, name = home.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {', '.join(homes)}")


def replay(name: str) -> dict[str, Any]:
    """One recording's golden entry: digests and the readable timeline."""
    # this tree's home first (core in homes), then 31930be's (core flat: the golden's producer)
    FleetPipeline = _first(
        "llmtop.core.pipeline.fleet:FleetPipeline", "llmtop.core.fleet:FleetPipeline"
    )
    Pipeline = _first("llmtop.core.pipeline.pipeline:Pipeline", "llmtop.core.pipeline:Pipeline")
    judge_window = _first(
        "llmtop.core.pipeline.verdict:judge_window", "llmtop.core.lookback:assess"
    )
    prometheus_replicas = _first(
        "llmtop.core.promql.promql_answers:prometheus_replicas",
        "llmtop.core.promql_answers:prometheus_replicas",
    )
    from llmtop.recording import report
    from llmtop.recording.reader import read_recording
    from llmtop.recording.replay import ReplaySource, is_fleet
    from llmtop.settings import HealthSettings

    health = HealthSettings()
    recording = read_recording(FIXTURES / f"{name}.jsonl.gz")
    source = ReplaySource(recording, health)
    snaps = source.snapshots()
    start = snaps[0].time
    timeline: list[dict[str, Any]] = []
    said: set[str] = set()
    before: list[str] | None = None
    for i, snap in enumerate(snaps):
        now = _findings(snap)
        if now != before:
            words = _words(snap)
            new = {k: words[k] for k in now if k not in said}
            said.update(new)
            entry: dict[str, Any] = {"poll": i, "at_s": round(snap.time - start, 1)}
            entry["status"] = snap.status
            entry["findings"] = now
            if new:
                entry["first_words"] = new
            timeline.append(entry)
            before = now
    built = report.build(
        snaps,
        source.events,
        source=f"{name}.jsonl.gz",
        ttft_slo_s=health.slo.ttft_s if hasattr(health, "slo") else vars(health)["ttft_slo_s"],
        live_findings=[recording.findings(i) for i in range(len(recording))],
    )
    pipeline_class = FleetPipeline if is_fleet(recording) else Pipeline
    raws = [recording.raw(i) for i in range(len(recording))]
    windows = []
    for end in range(WINDOW_EVERY, len(raws) + 1, WINDOW_EVERY):
        window = raws[max(0, end - WINDOW_POLLS) : end]
        verdict = judge_window(window, health, 1.0, pipeline_class=pipeline_class)
        windows.append(_digest(verdict))
    looped = pipeline_class(health)
    span = recording.times[-1] - recording.times[0] + 1.0
    played = []
    for k in range(LOOPS):
        for raw in raws:
            raw = dataclasses.replace(raw, time=raw.time + k * span)
            if isinstance(looped, FleetPipeline):
                played.append(_digest(looped.update(raw, prometheus_replicas(raw))))
            else:
                played.append(_digest(looped.update(raw)))
    return {
        "polls": len(snaps),
        "all": _digest([_digest(s) for s in snaps]),
        "report": _digest(built.to_dict(with_series=True)),
        "snapshot_windows": windows,
        "per_poll": [_digest(s) for s in snaps],
        "looped": {"all": _digest(played), "per_poll": played},
        "timeline": timeline,
    }


def golden() -> dict[str, Any]:
    """Every recording's entry, by name."""
    return {name: replay(name) for name in RECORDINGS}


def dumps(data: dict[str, Any]) -> str:
    """The golden as JSON, a line per digest list and per timeline entry (a diff shows what
    changed, and the file stays short)."""
    out = ["{"]
    for i, (name, entry) in enumerate(data.items()):
        out.append(f"{json.dumps(name)}: {{")
        items = list(entry.items())
        for j, (key, value) in enumerate(items):
            end = "," if j < len(items) - 1 else ""
            if key == "timeline":
                lines = [json.dumps(x) for x in value]
                out.append(' "timeline": [\n  ' + ",\n  ".join(lines) + f"\n ]{end}")
            elif key == "looped":
                out.append(f' "looped": {{"all": {json.dumps(value["all"])},')
                out.append(f'  "per_poll": {json.dumps(value["per_poll"])}}}{end}')
            else:
                out.append(f" {json.dumps(key)}: {json.dumps(value)}{end}")
        out.append("}," if i < len(data) - 1 else "}")
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN.name}")
    args = parser.parse_args(argv)
    text = dumps(golden())
    if args.write:
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
