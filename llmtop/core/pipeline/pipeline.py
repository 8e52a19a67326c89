"""RawPoll -> Snapshot: the one place that turns raw inputs into stats, history and findings.

Pure and deterministic: time comes only from `RawPoll.time`, so feeding the same RawPolls to a
fresh Pipeline yields the same Snapshots (recording and replay rely on it). It keeps, per
engine URL, a reset-aware counter window (`series.CounterWindow`), the rules' hysteresis state
(`health.HealthState`), and ~10 minutes of Snapshots (`pipeline.snapshots`, oldest first: what
the rules look back on).
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from llmtop.core.base.admin_api import LIMITS
from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import EngineStats, GatewayStats, ReplicaStats, Snapshot, Status
from llmtop.core.derive.derive import counter_columns, derive_engine
from llmtop.core.derive.fleet_scrape import restart_values, went_back
from llmtop.core.derive.series import CounterWindow, Key
from llmtop.core.dialects import catalog as dialects
from llmtop.core.findings.catalog import HealthState
from llmtop.core.findings.history import RisingHistory
from llmtop.core.health.kv_maxima import KvMaxima
from llmtop.core.health.rulebase import Context
from llmtop.core.health.thresholds import HealthSettings
from llmtop.core.vllm.scrape import EngineScrape

HISTORY_S = 600.0


class EngineTrack:
    """What a pipeline remembers about one engine: its counters' window and when its token
    counters last moved (the one engine's pipeline and each of a fleet's rows)."""

    def __init__(self, keep_s: float = HISTORY_S) -> None:
        self.window = CounterWindow(keep_s=keep_s)
        self.last_progress: float | None = None
        self.progress_total: float | None = None
        self.restarted_at: float | None = None
        """When its counters last went back (a restart: the window's rates carry across it)."""
        self._restart_values: dict[Key, float] | None = None

    def fold(self, t: float, raw: RawEngine, scrape: EngineScrape, window_s: float) -> EngineStats:
        """One scrape into the window, derived into the engine's figures."""
        self.window.add_columns(t, *counter_columns(scrape))
        total = scrape.counters.get("generation_tokens", 0.0) + scrape.counters.get(
            "prompt_tokens", 0.0
        )
        if self.progress_total is None or total != self.progress_total:
            self.last_progress = t
        self.progress_total = total
        values = restart_values(scrape)
        if self._restart_values is not None and went_back(self._restart_values, values):
            self.restarted_at = t
        self._restart_values = values
        stats = derive_engine(raw.url, scrape, self.window, window_s, version=raw.version)
        if stats.model is None and raw.model is not None:
            stats = replace(stats, model=raw.model)
        if stats.engine is None and raw.engine is not None:  # named by its info endpoint
            d = dialects.BY_KIND.get(raw.engine)
            error = f"exports no {d.prefix}* metrics" if d else stats.error
            stats = replace(stats, engine=raw.engine, error=error)
        if self.restarted_at is not None:
            stats = replace(stats, restarted_at=self.restarted_at)
        return stats


class Pipeline:
    """Derives Snapshots from RawPolls; holds the series, history and hysteresis state."""

    def __init__(
        self,
        health: HealthSettings,
        *,
        window_s: float | None = None,
        max_num_seqs: int | None = None,
    ) -> None:
        self.settings = health if window_s is None else replace(health, window_s=window_s)
        self.window_s = self.settings.window_s
        self.max_num_seqs = max_num_seqs
        self.health = HealthState(self.settings)
        self._engines: dict[str, EngineTrack] = {}
        self._gateway = CounterWindow(keep_s=HISTORY_S)
        self._snapshots: deque[Snapshot] = deque()
        self._steps_back = 0
        """How many kept snapshots are earlier than the one before them (a clock stepped back):
        none, and the rules get the history as a `RisingHistory` they may bisect."""
        self._kv_maxima = KvMaxima(self.settings.window_s, HISTORY_S)
        """The rules' KV look-backs over `_snapshots`."""

    @property
    def snapshots(self) -> tuple[Snapshot, ...]:
        """Recent snapshots, oldest first."""
        return tuple(self._snapshots)

    def update(self, raw: RawPoll) -> Snapshot:
        """Fold one poll in and return its Snapshot."""
        t = raw.time
        engine_stats = tuple(self._engine(t, e) for e in raw.engines)
        gateway = self._gateway_stats(raw)
        progress = {
            url: track.last_progress
            for url, track in self._engines.items()
            if track.last_progress is not None
        }
        ctx = Context(
            time=t,
            engines=engine_stats,
            gateway=gateway,
            gpus=raw.gpus,
            settings=self.settings,
            history=self._history(),
            last_progress=progress,
            max_num_seqs=self.max_num_seqs,
            kv_maxima=self._kv_maxima,
        )
        findings = self.health.evaluate(ctx)
        snap = Snapshot(
            time=t,
            engines=engine_stats,
            gateway=gateway,
            gpus=raw.gpus,
            gpu_error=raw.gpu_error,
            findings=findings,
            status=_status(engine_stats, findings),
        )
        self._remember(snap)
        return snap

    def _engine(self, t: float, raw: RawEngine) -> EngineStats:
        if raw.samples is None:
            return EngineStats(
                url=raw.url,
                up=False,
                error=raw.error or "no answer",
                model=raw.model,
                engine=raw.engine or "vllm",
            )
        track = self._engines.get(raw.url)
        if track is None:
            track = self._engines[raw.url] = EngineTrack()
        scrape = dialects.extract(raw.samples, kind=raw.forced_kind)
        return track.fold(t, raw, scrape, self.window_s)

    def _gateway_stats(self, raw: RawPoll) -> GatewayStats | None:
        if raw.gateway_url is None:
            return None
        if raw.gateway is None:
            return GatewayStats(
                url=raw.gateway_url, up=False, error=raw.gateway_error or "no answer"
            )
        return gateway_stats(raw.gateway_url, raw.gateway, raw.time, self._gateway, self.window_s)

    def _history(self) -> tuple[Snapshot, ...]:
        snaps = self._snapshots
        return RisingHistory(snaps) if not self._steps_back else tuple(snaps)

    def _remember(self, snap: Snapshot) -> None:
        snaps = self._snapshots
        if snaps and not snaps[-1].time <= snap.time:  # NaN too: never vouched for
            self._steps_back += 1
        snaps.append(snap)
        self._kv_maxima.keep(snap)
        while snaps and snaps[0].time < snap.time - HISTORY_S:
            gone = snaps.popleft()
            if snaps and not gone.time <= snaps[0].time:
                self._steps_back -= 1


KV, DECODE = ("kv_usage",), ("generation_tokens",)
"""Core inputs a status needs, unless the engine's dialect lacks them (llama.cpp's KV use)."""


def _status(engines: tuple[EngineStats, ...], findings: tuple[Any, ...]) -> Status:
    """unknown when no engine is up with its core inputs known (those its engine exports);
    else from the findings."""
    known = [
        e
        for e in engines
        if e.up
        and not e.stats_disabled
        and e.running is not None
        and (e.kv_cache_usage_frac is not None or dialects.lacking(e.engine, KV) is not None)
        and (e.decode_tok_per_s is not None or dialects.lacking(e.engine, DECODE) is not None)
    ]
    if not known:
        return "unknown"
    if any(f.severity == "critical" for f in findings):
        return "critical"
    if any(f.severity == "warning" for f in findings):
        return "degraded"
    return "ok"  # info findings are heads-ups: the SLO holds


def _str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) else None


def _num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(d: dict[str, Any], key: str) -> int | None:
    v = _num(d, key)
    return None if v is None else int(v)


def _dict(d: dict[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def gateway_stats(
    url: str, data: dict[str, Any], t: float, window: CounterWindow, window_s: float
) -> GatewayStats:
    """The gateway's /admin/stats JSON -> GatewayStats; 429 rates from its counters' deltas."""
    outcomes = {k: int(v) for k, v in _dict(data, "outcomes").items() if isinstance(v, int | float)}
    rejections = {
        k: float(v) for k, v in _dict(data, "rejections").items() if isinstance(v, int | float)
    }
    counters: dict[Key, float] = {(f"rej:{k}", None): v for k, v in rejections.items()}
    if "timed_out" in outcomes:
        counters[("rej:queue_timeout", None)] = float(outcomes["timed_out"])
    for k, v in _dict(data, "upstream_errors").items():
        if isinstance(v, int | float):
            counters[(f"up:{k}", None)] = float(v)
    window.add(t, counters)
    rejected_per_s: dict[str, float] = {}
    upstream_errors_per_s: dict[str, float] = {}
    for (name, _), _v in counters.items():
        r = window.rate((name, None), window_s)
        if r is None:
            continue
        if name.startswith("up:"):
            upstream_errors_per_s[name.removeprefix("up:")] = r
        else:
            rejected_per_s[name.removeprefix("rej:")] = r
    limits = _dict(data, "limits")
    wait, ttft, upstream = (
        _dict(data, "queue_wait_s"),
        _dict(data, "ttft_s"),
        _dict(data, "upstream"),
    )
    all_outcomes = dict(outcomes)
    for k, v in rejections.items():
        all_outcomes[f"rejected:{k}"] = int(v)
    parse = {"int": _int, "float": _num, "choice": _str}
    limit_values: dict[str, Any] = {s.field: parse[s.kind](limits, s.field) for s in LIMITS}
    paused = data.get("paused")
    healthy = upstream.get("healthy")
    shared, slo = _dict(data, "shared"), _dict(data, "slo")
    return GatewayStats(
        url=url,
        up=True,
        in_flight=_int(data, "in_flight"),
        queued=_int(data, "queued"),
        queued_by_priority={
            k: int(v)
            for k, v in _dict(data, "queued_by_priority").items()
            if isinstance(v, int | float)
        },
        **limit_values,
        autopilot_reason=_str(_dict(data, "autopilot"), "reason"),
        binding=_str(data, "binding"),
        binding_reason=_str(_dict(data, "autopilot"), "binding_reason"),
        unprefilled_prompt_tokens=_int(data, "unprefilled_prompt_tokens"),
        paused=paused if isinstance(paused, bool) else None,
        outcomes=all_outcomes,
        rejected_per_s=rejected_per_s,
        queue_wait_p50_s=_num(wait, "p50"),
        queue_wait_p95_s=_num(wait, "p95"),
        ttft_p50_s=_num(ttft, "p50"),
        ttft_p95_s=_num(ttft, "p95"),
        upstream_healthy=healthy if isinstance(healthy, bool) else None,
        upstream_errors_per_s=upstream_errors_per_s,
        oldest_queued_s=_num(data, "oldest_queued_s"),
        oldest_unanswered_s=_num(data, "oldest_unanswered_s"),
        queued_ages_s=_ages(data.get("queued_ages_s")),
        replicas=_replicas(data.get("replicas")),
        shared_status=_str(shared, "status") if _str(shared, "backend") == "redis" else None,
        shared_live_gateways=_int(shared, "live_gateways"),
        shared_draining_gateways=_int(shared, "draining_gateways"),
        shared_url=_str(shared, "url"),
        shared_error=_str(shared, "last_error"),
        global_in_flight=_int(shared, "global_in_flight"),
        slo_ttft_s=_num(slo, "ttft_s"),
        queue_budget_s=_num(slo, "queue_budget_s"),
        engine_ttft_s=_num(slo, "engine_ttft_s"),
        tenant_ttft_slo_s=tuple(
            (str(k), float(v))
            for k, v in sorted(_dict(slo, "tenant_ttft_s").items())
            if isinstance(v, int | float) and not isinstance(v, bool)
        ),
    )


def _ages(raw: object) -> tuple[float, ...]:
    """The gateway's `queued_ages_s`; anything that is not a list of numbers reads as none."""
    if not isinstance(raw, list):
        return ()
    ages = [float(a) for a in raw if isinstance(a, int | float) and not isinstance(a, bool)]
    return tuple(ages) if len(ages) == len(raw) else ()


def _replicas(raw: object) -> tuple[ReplicaStats, ...]:
    """The replicas of /admin/stats; anything that is not a replica object is dropped."""
    if not isinstance(raw, list):
        return ()
    return tuple(
        ReplicaStats(
            url=_str(r, "url") or "?",
            in_flight=_int(r, "in_flight"),
            ok=r.get("state") == "ok",
            share=_num(r, "share"),
            state=_str(r, "state"),
            last_error=_str(r, "last_error"),
            out_for_s=_num(r, "out_for_s"),
            back_s_ago=_num(r, "back_s_ago"),
            request_tok_per_s=_num(r, "request_tok_per_s"),
            request_seconds=_num(r, "request_seconds") or 0.0,
        )
        for r in raw
        if isinstance(r, dict)
    )
