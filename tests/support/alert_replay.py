"""Recorded polls as promtool `input_series`, and the two verdicts on them side by side.

A recording (or a few real captures) is put on a one-second grid: each grid second holds the
last poll at or before it. The same grid is fed to llmtop's pipeline (as RawPolls at the grid
times) and, as `input_series`, to `promtool test rules` with the generated rules, so the two
judge the very same samples:

- vLLM's samples, as scraped (names and labels as recorded), with `job="vllm"` and
  `instance=<host:port>`, and `up`; a failed scrape is `up 0` and its series go stale, as
  Prometheus marks them;
- the gateway's /admin/stats, as the series its /metrics exports from the same controller
  (llmtop_gateway_in_flight, _queued, _limit_*, _rejections_total, _requests_total{outcome},
  _oldest_queued_seconds, _oldest_unanswered_seconds, _paused). Its queue-wait histogram is
  not in a recording (only the p50/p95 it answered), so a finding that only that quantile
  makes cannot be compared (the test's table says where).

`llmtop_spans` and `prometheus_spans` give, per (alert, instance), when each fired and
resolved; `assertions` writes the promtool test that fails when they disagree.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llmtop.core.alerts.alert import alert_name
from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import FleetSnapshot, Snapshot
from llmtop.core.health.thresholds import HealthSettings
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.pipeline.targets import default_name

Key = tuple[str, str | None]
"""(alert name, instance): None for a fleet-wide finding, compared by name only."""
FLEET_WIDE = frozenset({"replica-outlier", "load-imbalance", "replica-down"})


@dataclass(frozen=True)
class Span:
    """An alert's (or a finding's) firing, in grid seconds; `end` None: still at the end."""

    start: int
    end: int | None


def grid(polls: Sequence[RawPoll]) -> list[RawPoll]:
    """The polls on a one-second grid from the first: each second the last poll at or before it."""
    t0 = polls[0].time
    out: list[RawPoll] = []
    i = 0
    for k in range(math.floor(polls[-1].time - t0) + 1):
        while i + 1 < len(polls) and polls[i + 1].time <= t0 + k + 1e-6:
            i += 1
        out.append(replace(polls[i], time=t0 + k, events=()))
    return out


def _labels(d: dict[str, str]) -> str:
    inside = ",".join(f'{k}="{v}"' for k, v in sorted(d.items()))
    return "{" + inside + "}"


class _Series:
    """Values per series over the grid; None where absent (stale after a present value)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.values: dict[str, list[float | None]] = defaultdict(lambda: [None] * n)

    def put(self, name: str, labels: dict[str, str], k: int, v: float) -> None:
        self.values[name + _labels(labels)][k] = v

    def yaml(self) -> list[dict[str, str]]:
        out = []
        for series, values in sorted(self.values.items()):
            text, seen = [], False
            for v in values:
                if v is None:
                    text.append("stale" if seen else "_")
                    seen = False
                else:
                    text.append(repr(float(v)) if math.isfinite(v) else "NaN")
                    seen = True
            out.append({"series": series, "values": " ".join(text)})
        return out


def _gateway(s: _Series, k: int, labels: dict[str, str], d: dict[str, Any]) -> None:
    """/admin/stats -> the gateway's exported series (gateway/server/metrics.py), where it says."""
    p = "llmtop_gateway_"

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    for key in ("in_flight",):
        if (v := num(d.get(key))) is not None:
            s.put(p + key, labels, k, v)
    for prio, n in (d.get("queued_by_priority") or {}).items():
        if (v := num(n)) is not None:
            s.put(p + "queued", {**labels, "priority": prio}, k, v)
    for reason, n in (d.get("rejections") or {}).items():
        if (v := num(n)) is not None:
            s.put(p + "rejections_total", {**labels, "reason": reason}, k, v)
    for outcome, n in (d.get("outcomes") or {}).items():
        if (v := num(n)) is not None:
            s.put(p + "requests_total", {**labels, "outcome": outcome}, k, v)
    for name, value in (d.get("limits") or {}).items():
        if (v := num(value)) is not None and name != "ttft_slo_s":
            metric = name.removesuffix("_s") + ("_seconds" if name.endswith("_s") else "")
            s.put(p + "limit_" + metric, labels, k, v)
    if "oldest_queued_s" in d:
        s.put(p + "oldest_queued_seconds", labels, k, num(d["oldest_queued_s"]) or 0.0)
    if "oldest_unanswered_s" in d:
        s.put(p + "oldest_unanswered_seconds", labels, k, num(d["oldest_unanswered_s"]) or 0.0)
    if isinstance(d.get("paused"), bool):
        s.put(p + "paused", labels, k, float(d["paused"]))


def input_series(polls: Sequence[RawPoll]) -> list[dict[str, str]]:
    """The grid's polls as promtool input_series (one value a second)."""
    s = _Series(len(polls))
    for k, poll in enumerate(polls):
        for e in poll.engines:
            target = {"job": "vllm", "instance": default_name(e.url)}
            s.put("up", target, k, 0.0 if e.samples is None else 1.0)
            for sample in e.samples or ():
                s.put(sample.name, {**dict(sample.labels), **target}, k, sample.value)
        if poll.gateway_url is not None:
            target = {"job": "gateway", "instance": default_name(poll.gateway_url)}
            s.put("up", target, k, 0.0 if poll.gateway is None else 1.0)
            if poll.gateway is not None:
                _gateway(s, k, target, poll.gateway)
    return s.yaml()


def _fleet(polls: Sequence[RawPoll]) -> bool:
    return len(polls[0].engines) > 1


def llmtop_spans(polls: Sequence[RawPoll], health: HealthSettings) -> dict[Key, list[Span]]:
    """When llmtop's findings held on the grid, fed through its own pipeline."""
    pipeline: Pipeline = FleetPipeline(health) if _fleet(polls) else Pipeline(health)
    seen: list[set[Key]] = []
    for poll in polls:
        snap = pipeline.update(poll)
        seen.append(_keys(snap, poll))
    return _spans(seen)


def _keys(snap: Snapshot, poll: RawPoll) -> set[Key]:
    out: set[Key] = set()
    fleet = snap.fleet if isinstance(snap, FleetSnapshot) else None
    if fleet is not None:
        for rep in fleet.replicas:
            for f in rep.findings:
                out.add((alert_name(f.id), rep.name))
        for f in fleet.findings:
            out.add((alert_name(f.id), None))
        gw = [f for f in snap.findings if f.bottleneck == "gateway"]
    else:
        gw = list(snap.findings)
    for f in gw:
        if f.bottleneck == "gateway" and poll.gateway_url is not None:
            out.add((alert_name(f.id), default_name(poll.gateway_url)))
        elif f.id in FLEET_WIDE:
            out.add((alert_name(f.id), None))
        elif poll.engines:
            out.add((alert_name(f.id), default_name(poll.engines[0].url)))
    return out


def _spans(seen: Sequence[set[Key]]) -> dict[Key, list[Span]]:
    out: dict[Key, list[Span]] = defaultdict(list)
    open_at: dict[Key, int] = {}
    for k, keys in enumerate(seen):
        for key in keys - open_at.keys():
            open_at[key] = k
        for key in [x for x in open_at if x not in keys]:
            out[key].append(Span(open_at.pop(key), k))
    for key, start in open_at.items():
        out[key].append(Span(start, None))
    return dict(out)


FIRING = 'count by (alertname, instance) (ALERTS{alertstate="firing"})'
_GOT = re.compile(r'\{alertname="([^"]+)"(?:, instance="([^"]*)")?\}')


def _test_file(rules: Path, series: list[dict[str, str]], tests: list[dict[str, Any]]) -> str:
    import json

    doc = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1s",
        "tests": [{"interval": "1s", "input_series": series, "promql_expr_test": tests}],
    }
    return json.dumps(doc)  # YAML is a superset of JSON


def run_promtool(promtool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )


def prometheus_spans(
    promtool: str, rules: Path, series: list[dict[str, str]], seconds: int, tmp: Path
) -> dict[Key, list[Span]]:
    """When Prometheus' alerts fired on the same grid: every second asks for nothing firing,
    and promtool's report of each failure lists what did."""
    tests = [{"expr": FIRING, "eval_time": f"{k}s", "exp_samples": []} for k in range(seconds)]
    path = tmp / "timeline.test.json"
    path.write_text(_test_file(rules, series, tests))
    done = run_promtool(promtool, path)
    out = done.stdout + done.stderr
    if done.returncode not in (0, 1) or ("FAILED" in out and "time:" not in out):
        raise AssertionError(f"promtool test rules could not run: {out[-2000:]}")
    seen: list[set[Key]] = [set() for _ in range(seconds)]
    at = None
    for line in out.splitlines():
        m = re.search(r"time: ((?:\d+h)?(?:\d+m)?(?:\d+s)?),", line)
        if m:
            at = _seconds(m.group(1))
        elif "got:" in line and at is not None:
            for name, instance in _GOT.findall(line):
                seen[at].add((name, instance or None))
    # a fleet-wide finding is compared by name: what replica the alert names is its own
    fleet_wide = {alert_name(f) for f in FLEET_WIDE}
    for keys in seen:
        for name, _ in [k for k in keys if k[0] in fleet_wide]:
            keys.add((name, None))
        keys.difference_update({k for k in keys if k[0] in fleet_wide and k[1] is not None})
    return _spans(seen)


def _seconds(go: str) -> int:
    """A Go duration as promtool prints eval times (1m5s, 2m, 0s) -> seconds."""
    total = 0
    for n, unit in re.findall(r"(\d+)([hms])", go):
        total += int(n) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a finding on one target, when each side fired/resolved."""

    key: Key
    llmtop: tuple[Span, ...]
    prometheus: tuple[Span, ...]
    agrees: bool
    note: str = ""


def _near(a: int | None, b: int | None, tolerance: int, end: int) -> bool:
    a = end if a is None else a
    b = end if b is None else b
    return abs(a - b) <= tolerance


def compare(
    ours: dict[Key, list[Span]],
    theirs: dict[Key, list[Span]],
    tolerance: dict[str, int],
    seconds: int,
    skipped: dict[Key, str],
) -> list[Row]:
    """Each key's spans on both sides; they agree when the spans pair up one to one with
    every start and end within the alert's tolerance (evaluation interval + its for:)."""
    rows = []
    for key in sorted(set(ours) | set(theirs), key=lambda k: (k[0], k[1] or "")):
        a, b = tuple(ours.get(key, ())), tuple(theirs.get(key, ()))
        t = tolerance.get(key[0], 1)
        agrees = len(a) == len(b) and all(
            _near(x.start, y.start, t, seconds) and _near(x.end, y.end, t, seconds)
            for x, y in zip(a, b, strict=True)
        )
        rows.append(Row(key, a, b, agrees, skipped.get(key, "")))
    return rows


def table(name: str, rows: Iterable[Row]) -> str:
    """The comparison as text (printed by the test, and quoted in docs/alerts.md)."""

    def spans(s: tuple[Span, ...]) -> str:
        return ", ".join(f"{x.start}-{'end' if x.end is None else x.end}" for x in s) or "-"

    lines = [f"{name}: alert [instance] | llmtop fired-cleared (s) | Prometheus | verdict"]
    for r in rows:
        where = f" [{r.key[1]}]" if r.key[1] else ""
        verdict = "agree" if r.agrees else ("skipped: " + r.note if r.note else "DISAGREE")
        lines.append(f"  {r.key[0]}{where} | {spans(r.llmtop)} | {spans(r.prometheus)} | {verdict}")
    return "\n".join(lines)


def assertions(
    ours: dict[Key, list[Span]],
    names: Iterable[str],
    instances: Iterable[str | None],
    tolerance: dict[str, int],
    seconds: int,
    skipped: Iterable[Key],
    every: int = 2,
) -> list[dict[str, Any]]:
    """promtool tests: for every alert and target (None: any target), at every `every` seconds
    farther than its tolerance from one of llmtop's edges, firing exactly where llmtop's
    finding holds."""
    tests = []
    skip = set(skipped)
    fleet_wide = {alert_name(f) for f in FLEET_WIDE}
    for name in names:
        for inst in instances:
            key = (name, inst)
            if key in skip or (name in fleet_wide and inst is not None):
                continue  # a fleet-wide alert names a replica of its own choosing
            # by name alone (inst None): any target's span, as the count over all of them
            spans = (
                ours.get(key, [])
                if inst is not None
                else [x for (n, _), found in ours.items() if n == name for x in found]
            )
            t = tolerance.get(name, 1)
            # a span still open at the end ends there for the tolerance, as in `compare`
            edges = [e for s in spans for e in (s.start, seconds if s.end is None else s.end)]
            match = f'alertname="{name}",alertstate="firing"' + (
                f',instance="{inst}"' if inst else ""
            )
            for k in range(0, seconds, every):
                if any(abs(k - e) <= t for e in edges):
                    continue
                firing = any(s.start <= k and (s.end is None or k < s.end) for s in spans)
                tests.append(
                    {
                        "expr": f"count(ALERTS{{{match}}}) > bool 0 or vector(0)",
                        "eval_time": f"{k}s",
                        "exp_samples": [{"labels": "{}", "value": 1 if firing else 0}],
                    }
                )
    return tests


def write_assertions(rules: Path, series: list[dict[str, str]], tests: list[Any], to: Path) -> Path:
    to.write_text(_test_file(rules, series, tests))
    return to
