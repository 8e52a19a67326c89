"""Many engines, each visible: per-replica figures and findings, fleet totals and findings. Pure.
A replica (a `--vllm` URL, a `--targets` line, a Prometheus instance; data-parallel engines as
sub-rows) keeps its own window, hysteresis and history, so its findings read as when watched
alone; `findings.fleet` compares them. A counter going back is a restart: an event, not a fault.
"""

from __future__ import annotations

import operator
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import replace

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import (
    DerivedReplica,
    EngineStats,
    Finding,
    Fleet,
    FleetEvent,
    FleetSnapshot,
    FleetTotals,
    Replica,
    Snapshot,
    Status,
)
from llmtop.core.derive.aggregate import max_known, sum_known
from llmtop.core.derive.fleet_scrape import restart_values, split_engines, went_back
from llmtop.core.derive.series import Key
from llmtop.core.dialects import catalog as dialects
from llmtop.core.findings.catalog import REPLICA_RULES, FleetHealth, HealthState
from llmtop.core.health.kv_maxima import KvMaxima
from llmtop.core.health.rulebase import Context, FleetView
from llmtop.core.health.thresholds import FleetRules, HealthSettings
from llmtop.core.pipeline.pipeline import EngineTrack, Pipeline
from llmtop.core.pipeline.targets import default_name
from llmtop.core.vllm.scrape import EngineScrape

HISTORY_S = 600.0
REPLICA_HISTORY_S = 120.0
"""Each replica's own snapshots, for its rules' look-backs (decode-bound scans all of them):
two minutes, not ten, so that a hundred replicas stay cheap; the fleet's Snapshots keep ten."""


class _Track(EngineTrack):
    """What the fleet remembers about one row: its window, rules and own history."""

    def __init__(self, settings: HealthSettings) -> None:
        # derive reads one window: keeping ten minutes of increments for each of a hundred
        # replicas would hold ~0.5 GB of dicts for nothing
        super().__init__(keep_s=max(2 * settings.window_s, 60.0))
        self.health = HealthState(settings, REPLICA_RULES)
        self.snapshots: deque[Snapshot] = deque()
        self.kv_maxima = KvMaxima(settings.window_s, REPLICA_HISTORY_S)
        """Its rules' KV look-backs over `snapshots`."""
        self.counters: dict[Key, float] | None = None
        self.restarts: float | None = None


def replica_status(stats: EngineStats, findings: Sequence[Finding]) -> Status:
    """As a Snapshot's status: unknown without the core figures, else from the findings."""
    known = (
        stats.up
        and not stats.stats_disabled
        and stats.running is not None
        and stats.kv_cache_usage_frac is not None
        and stats.decode_tok_per_s is not None
    )
    if any(f.severity == "critical" for f in findings):
        return "critical"
    if not known:
        return "unknown"
    return "degraded" if any(f.severity != "info" for f in findings) else "ok"


_STATUS_RANK = {"critical": 1, "degraded": 2}
_NAME = operator.itemgetter(0)  # Sample is a named tuple: (name, labels, value)


def _rank(r: Replica) -> tuple[int, float, float, float]:
    """Sort key, worst first: down, critical, warning; then waiting, KV, TTFT p95."""
    e = r.stats
    severity = 0 if not e.up else _STATUS_RANK.get(r.status, 3)
    return (
        severity,
        -(e.waiting or 0.0),
        -(e.kv_cache_usage_frac or 0.0),
        -(e.ttft_p95_s or 0.0),
    )


def worst_first(rows: Sequence[Replica]) -> tuple[Replica, ...]:
    """Servers worst first, each followed by its own sub-rows, worst first."""
    children: dict[str, list[Replica]] = defaultdict(list)
    for r in rows:
        if r.parent is not None:
            children[r.parent].append(r)
    out: list[Replica] = []
    for server in sorted((r for r in rows if r.parent is None), key=_rank):
        out.append(server)
        out.extend(sorted(children.get(server.key, ()), key=_rank))
    return tuple(out)


def totals(servers: Sequence[Replica]) -> FleetTotals:
    """Fleet totals over the servers that answer: counts and rates summed, KV mean and max."""
    up = [r.stats for r in servers if r.stats.up]
    kv = [e.kv_cache_usage_frac for e in up if e.kv_cache_usage_frac is not None]
    return FleetTotals(
        replicas=len(servers),
        up=len(up),
        running=sum_known([e.running for e in up]),
        waiting=sum_known([e.waiting for e in up]),
        prompt_tok_per_s=sum_known([e.prompt_tok_per_s for e in up]),
        decode_tok_per_s=sum_known([e.decode_tok_per_s for e in up]),
        kv_cache_usage_frac_mean=sum(kv) / len(kv) if kv else None,
        kv_cache_usage_frac_max=max(kv) if kv else None,
        ttft_p95_s_max=max_known([e.ttft_p95_s for e in up]),
        itl_p95_s_max=max_known([e.itl_p95_s for e in up]),
    )


_SEVERITY = {"critical": 0, "warning": 1, "info": 2}


def grouped_findings(servers: Sequence[Replica]) -> tuple[Finding, ...]:
    """The replicas' own findings, one per rule, naming the replicas (worst's evidence shown).

    target-down is left out: the fleet's replica-down names every replica that is down.
    """
    by_id: dict[str, list[tuple[Replica, Finding]]] = defaultdict(list)
    for r in servers:
        for f in r.findings:
            if f.id != "target-down":
                by_id[f.id].append((r, f))
    out: list[Finding] = []
    for items in by_id.values():
        items.sort(key=lambda x: _SEVERITY[x[1].severity])
        r, f = items[0]
        head = f"{r.name}: "
        if len(items) > 1:
            names = ", ".join(x.name for x, _ in items[:4])
            more = f" and {len(items) - 4} more" if len(items) > 4 else ""
            head = f"on {len(items)} replicas ({names}{more}); {head}"
        since = [x.since for _, x in items if x.since is not None]
        out.append(_headed(f, head, min(since) if since else None))
    out.sort(key=lambda f: _SEVERITY[f.severity])
    return tuple(out)


def _headed(f: Finding, head: str, since: float | None) -> Finding:
    """`f` with `head` before its summary."""
    return replace(f, summary=head + f.summary, since=since)


class FleetPipeline(Pipeline):
    """Derives per-replica stats and findings and the fleet's; a drop-in for `Pipeline` (its
    snapshots and history are the fleet's Snapshots)."""

    def __init__(
        self,
        health: HealthSettings,
        *,
        window_s: float | None = None,
        max_num_seqs: int | None = None,
    ) -> None:
        super().__init__(health, window_s=window_s, max_num_seqs=max_num_seqs)
        self.rules = FleetRules.of(self.settings)
        self.names: dict[str, str] = {}
        """Server URL -> the name to show (from --targets); host:port otherwise."""
        self.fleet: Fleet | None = None
        self._edge = Pipeline(self.settings, max_num_seqs=max_num_seqs)  # gateway and GPUs
        self._fleet_health = FleetHealth(self.rules)
        self._tracks: dict[str, _Track] = {}
        self._events: deque[FleetEvent] = deque()

    def update(self, raw: RawPoll, derived: Sequence[DerivedReplica] = ()) -> Snapshot:
        """Fold one poll in (scraped engines in `raw`, PromQL ones in `derived`): the Snapshot every
        view reads (the fleet's findings, then the replicas' grouped by rule); the per-replica
        `Fleet` is kept in `.fleet`."""
        t = raw.time
        rows: list[Replica] = []
        for e in raw.engines:
            rows.extend(self._scraped(t, e))
        for d in derived:
            rows.append(self._derived(t, d))
        seen = {r.key for r in rows}
        for key in [k for k in self._tracks if k not in seen]:
            del self._tracks[key]  # a target that left the targets file, a pod that is gone
        while self._events and self._events[0].time < t - HISTORY_S:
            self._events.popleft()
        ordered = worst_first(rows)
        servers = [r for r in ordered if r.parent is None]
        parents = {r.parent for r in ordered if r.parent is not None}
        leaves = [r for r in ordered if r.key not in parents]
        fleet_findings = self._fleet_health.evaluate(FleetView(t, servers, leaves, self.rules))
        edge = self._edge.update(replace(raw, engines=()))
        findings = fleet_findings + grouped_findings(servers) + edge.findings
        status = _fleet_status(servers, findings)
        self.fleet = Fleet(
            time=t,
            replicas=ordered,
            totals=totals(servers),
            findings=fleet_findings,
            events=tuple(self._events),
            status=status,
        )
        snap = FleetSnapshot(
            time=t,
            engines=tuple(r.stats for r in servers),
            gateway=edge.gateway,
            gpus=raw.gpus,
            gpu_error=raw.gpu_error,
            findings=tuple(sorted(findings, key=lambda f: _SEVERITY[f.severity])),
            status=status,
            fleet=self.fleet,
        )
        self._remember(snap)
        return snap

    def _scraped(self, t: float, raw: RawEngine) -> list[Replica]:
        name = self.names.get(raw.url) or default_name(raw.url)
        if raw.samples is None:
            stats = EngineStats(url=raw.url, up=False, error=raw.error or "no answer")
            return [self._judge(t, raw.url, name, stats)]
        names = list(map(_NAME, raw.samples))  # read once, for the plan and the split
        scrape = dialects.extract(raw.samples, names, kind=raw.forced_kind)
        rows = [self._from_scrape(t, raw.url, name, scrape, raw)]
        for engine, samples in split_engines(raw.samples, names).items():
            key = f"{raw.url}#engine={engine}"
            split = dialects.extract(samples, kind=raw.forced_kind)
            row = self._from_scrape(t, key, f"{name}#{engine}", split, raw)
            rows.append(replace(row, engine=engine, parent=raw.url))
        return rows

    def _from_scrape(
        self, t: float, key: str, name: str, scrape: EngineScrape, raw: RawEngine
    ) -> Replica:
        track = self._track(key)
        values = restart_values(scrape)
        if track.counters is not None and (back := went_back(track.counters, values)):
            what, before, now = back
            self._restart(t, name, f"{what.replace('_', ' ')} {before:,.0f} -> {now:,.0f}")
        track.counters = values
        return self._judge(t, key, name, track.fold(t, raw, scrape, self.window_s))

    def _derived(self, t: float, d: DerivedReplica) -> Replica:
        track = self._track(d.key)
        if d.restarts is not None:
            if track.restarts is not None and d.restarts > track.restarts:
                self._restart(t, d.name, "a counter went back (Prometheus resets())")
            track.restarts = d.restarts
        moving = (d.stats.decode_tok_per_s or 0.0) + (d.stats.prompt_tok_per_s or 0.0)
        if track.last_progress is None or moving > 0:
            track.last_progress = t
        return self._judge(t, d.key, d.name, d.stats, d.engine, d.parent)

    def _track(self, key: str) -> _Track:
        """The row's track, made on first sight (not built each poll to be thrown away)."""
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(self.settings)
        return track

    def _restart(self, t: float, name: str, evidence: str) -> None:
        self._events.append(
            FleetEvent(
                time=t,
                kind="restart",
                replica=name,
                summary=f"{name} restarted: {evidence}; its rates start again from zero",
            )
        )

    def _judge(
        self,
        t: float,
        key: str,
        name: str,
        stats: EngineStats,
        engine: str | None = None,
        parent: str | None = None,
    ) -> Replica:
        track = self._track(key)
        last = track.last_progress
        ctx = Context(
            time=t,
            engines=(stats,),
            gateway=None,
            gpus=(),
            settings=self.settings,
            # the deque itself, not a copy: the rules only read it, before it grows below, and
            # copying 120 snapshots (touching each one's count twice) for each replica and
            # poll cost more than most rules
            history=track.snapshots,
            last_progress={} if last is None else {stats.url: last},
            max_num_seqs=self.max_num_seqs,
            kv_maxima=track.kv_maxima,
        )
        findings = track.health.evaluate(ctx)
        status = replica_status(stats, findings)
        snap = Snapshot(time=t, engines=(stats,), findings=findings, status=status)
        track.snapshots.append(snap)
        track.kv_maxima.keep(snap)
        while track.snapshots and track.snapshots[0].time < t - REPLICA_HISTORY_S:
            track.snapshots.popleft()
        return Replica(key, name, stats, findings, status, engine, parent)


def _fleet_status(servers: Sequence[Replica], findings: Sequence[Finding]) -> Status:
    if any(f.severity == "critical" for f in findings):
        return "critical"
    if not any(r.status != "unknown" for r in servers if r.stats.up):
        return "unknown"  # no replica answers with its core figures: unknown is not ok
    return "degraded" if any(f.severity != "info" for f in findings) else "ok"
