"""The answers of `promql`'s queries -> rows (`PromAnswers`: what a recording keeps) ->
per-replica `EngineStats`. Pure. A packed answer is a series per replica (or engine) whose
`FIGURES` label holds its query's figures in order (`read_rows`); `replicas` adds data-parallel
engines as sub-rows and, as `derive`, reads a first-bucket quantile as the capped window mean.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import not_
from typing import Any

from llmtop.core.base.raw import PromAnswers, PromRow, RawPoll
from llmtop.core.base.snapshot import DerivedReplica, EngineStats
from llmtop.core.derive.derive import NO_GAUGES
from llmtop.core.dialects.engines import DIALECTS
from llmtop.core.promql.promql import (
    ENGINE,
    FIGURE,
    FIGURES,
    FINISHED_PREFIX,
    KIND,
    KIND_FIGURE,
    QUANTILES,
    VLLM_KIND,
    quantile_figure,
)

_HELPERS = ("up", "engines", "new_reasons")
"""Figures only the source reads (to find down, data-parallel and changed replicas)."""


@dataclass(frozen=True)
class Info:
    """The slow-changing figures: read at the start, then now and then (`INFO_EVERY_S`)."""

    replicas: frozenset[str] = frozenset()
    kv_blocks: Mapping[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    """(replica, engine) -> (KV blocks, block size); engine "" = the server's sum."""
    models: Mapping[str, str] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    """The finished reasons known, in the order of the `finished_<i>` figures."""
    first_bounds: Mapping[str, float] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)
    """Replica -> its engine where not vLLM (sglang, llamacpp, ...): asked in its own names."""


def _number(text: Any) -> float | None:
    """A label's or a sample's value; NaN and infinities are unknown, never zero."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def read_info(answer: Iterable[Mapping[str, Any]], replica_label: str = "instance") -> Info:
    """The `Queries.info` answer -> `Info`."""
    replicas: set[str] = set()
    blocks: dict[tuple[str, str], tuple[int, int]] = {}
    models: dict[str, str] = {}
    reasons: set[str] = set()
    bounds: dict[str, float] = {}
    kinds: dict[str, set[str]] = {}
    for item in answer:
        labels = item.get("metric", {})
        figure, replica = labels.get(FIGURE), labels.get(replica_label, "")
        if figure == "replica" and replica:
            replicas.add(str(replica))
        elif figure == "cache_config" and replica:
            try:
                kv = (int(labels["num_gpu_blocks"]), int(labels["block_size"]))
            except (KeyError, ValueError):
                continue
            blocks[(str(replica), str(labels.get(ENGINE, "")))] = kv
        elif figure == "model" and replica and labels.get("model_name"):
            name = str(labels["model_name"])
            models[str(replica)] = min(name, models.get(str(replica), name))
        elif figure == "kind" and replica and labels.get(KIND):
            kinds.setdefault(str(replica), set()).add(str(labels[KIND]))
        elif figure == "reason" and labels.get("finished_reason"):
            reasons.add(str(labels["finished_reason"]))
        elif isinstance(figure, str) and figure.startswith("bounds_"):
            bound = _number(labels.get("le"))
            key = figure.removeprefix("bounds_")
            if bound is not None:
                bounds[key] = min(bound, bounds.get(key, bound))
    servers: dict[str, tuple[int, int]] = {}
    for (replica, engine), (n, size) in sorted(blocks.items()):
        if engine:
            total, first_size = servers.get(replica, (0, size))
            servers[replica] = (total + n, first_size)
    for (replica, engine), kv in blocks.items():
        if not engine:
            servers.setdefault(replica, kv)
    all_blocks = {**blocks, **{(r, ""): kv for r, kv in servers.items()}}
    return Info(
        frozenset(replicas), all_blocks, models, tuple(sorted(reasons)), bounds, _first(kinds)
    )


def _first(kinds: Mapping[str, set[str]]) -> dict[str, str]:
    """Replica -> its engine, where not vLLM: of the engines whose families it exports, the
    first in `DIALECTS` (as a direct scrape reads a mixed exposition: `dialects.detect`)."""
    out = {}
    for replica, found in kinds.items():
        first = next((d.kind for d in DIALECTS if d.kind in found), VLLM_KIND)
        if first != VLLM_KIND:
            out[replica] = first
    return out


def _figures(text: str, names: Sequence[str]) -> dict[str, float | None] | None:
    """A packed series' `FIGURES` -> name -> value (NaN, infinities and anything not a number:
    unknown); None when the count of values is not the count of names (not our answer)."""
    parts = text.split(",")
    if len(parts) != len(names):
        return None
    try:
        values = list(map(float, parts))
    except ValueError:
        return dict(zip(names, map(_number, parts), strict=True))
    out: dict[str, float | None] = dict(zip(names, values, strict=True))
    if "n" in text or "N" in text:  # a NaN or an infinity: every spelling of them has an n
        for name in compress(names, map(not_, map(math.isfinite, values))):
            out[name] = None
    return out


Answer = tuple[Sequence[str], Iterable[Mapping[str, Any]]]
"""A packed query's figure names and its answer's series."""


def read_rows(
    answers: Iterable[Answer],
    info: Info,
    replica_label: str = "instance",
    *,
    by_engine: bool = False,
    reasons: Sequence[str] | None = None,
    kind: str | None = None,
) -> list[PromRow]:
    """Packed answers (the `Queries.replicas` or `.engines` pair, asked with `reasons`, by
    default `info.reasons`) -> one row per replica (or engine), its figures from every answer;
    an engine other than vLLM's rows carry its `KIND_FIGURE`."""
    known = info.reasons if reasons is None else reasons
    finished = {f"{FINISHED_PREFIX}{i}": reason for i, reason in enumerate(known)}
    merged: dict[tuple[str, str], dict[str, float | None]] = {}
    for names, answer in answers:
        for item in answer:
            labels = item.get("metric")
            if not isinstance(labels, dict) or not labels.get(replica_label):
                continue
            text = labels.get(FIGURES)
            figures = _figures(text, names) if isinstance(text, str) else None
            if figures is None:
                continue
            key = (str(labels[replica_label]), str(labels.get(ENGINE, "")) if by_engine else "")
            if key in merged:
                merged[key].update(figures)
            else:
                merged[key] = figures
    out: list[PromRow] = []
    for (replica, engine), figures in merged.items():
        per_reason: dict[str, float] = {}
        for name, reason in finished.items():
            value = figures.pop(name, None)
            if value is not None:
                per_reason[reason] = value
        blocks, size = info.kv_blocks.get((replica, engine), (None, None))
        model = info.models.get(replica)
        if kind is not None and kind != VLLM_KIND:
            figures[KIND_FIGURE + kind] = 1.0
        out.append(PromRow(replica, engine, figures, per_reason, model, blocks, size))
    return out


def unmatched_selector(info: Info) -> bool:
    """Whether the selector picks vLLM series but not their targets' `up` (a label only the
    series carry, such as model_name): the replicas are found through `up`."""
    return not info.replicas and bool(info.models)


def stale(info: Info, rows: Iterable[PromRow], resets_before: Mapping[str, float | None]) -> bool:
    """Whether `info` needs asking again: a replica it does not know, a finished reason it does
    not know, or a replica that restarted (a counter reset more than at the previous poll)."""
    for row in rows:
        if row.replica not in info.replicas or row.figures.get("new_reasons"):
            return True
        before, now = resets_before.get(row.replica), row.figures.get("resets")
        if before is not None and now is not None and now > before:
            return True
    return False


def data_parallel(rows: Iterable[PromRow]) -> bool:
    """Whether a replica runs several engines (its engines' rows then need `Queries.engines`)."""
    return any((row.figures.get("engines") or 0) > 1 for row in rows)


_QUANTILE_FIELDS: tuple[tuple[str, str, str | None, str], ...] = tuple(
    (
        sys.intern(f"{key}_p{round(q * 100)}_s"),  # interned: matched as a keyword at once
        key,
        quantile_figure(key, q) if q in QUANTILES.get(key, ()) else None,
        f"mean_{key}",
    )
    for key, qs in (
        ("ttft", (0.5, 0.95, 0.99)),
        ("itl", (0.5, 0.95, 0.99)),
        ("e2e", (0.95,)),
        ("queue_time", (0.5, 0.95)),
    )
    for q in qs
)
"""(EngineStats field, histogram, figure asked or None, its window mean's figure) of each
quantile a replica's stats carry."""


def _quantiles(f: Mapping[str, float | None], bounds: Mapping[str, float]) -> dict[str, Any]:
    """Every quantile field: PromQL's quantile, or the window mean capped at the first bound
    when it falls there; None when unknown or not asked (a direct scrape's e2e p50, say)."""
    out: dict[str, Any] = {}
    for name, key, figure, mean_figure in _QUANTILE_FIELDS:
        v = None if figure is None else f.get(figure)
        if v is not None:
            bound, mean = bounds.get(key), f.get(mean_figure)
            if bound is not None and v <= bound and mean is not None:
                v = min(mean, bound)
        out[name] = v
    return out


def _engines_kv(server: PromRow, engines: Sequence[PromRow]) -> float | None:
    """A data-parallel server's KV usage: its engines' weighted by their KV blocks."""
    kv = [(e.figures.get("kv_usage"), e.kv_blocks) for e in engines]
    if not all(v is not None for v, _ in kv):
        return server.figures.get("kv_usage")
    if all(b for _, b in kv):
        total = sum(b or 0 for _, b in kv)
        return sum((v or 0.0) * (b or 0) for v, b in kv) / total
    return sum(v or 0.0 for v, _ in kv) / len(kv)


def kind_of(figures: Mapping[str, float | None]) -> str:
    """A row's engine: the one its `KIND_FIGURE` names, else vLLM."""
    for name in figures:
        if name.startswith(KIND_FIGURE):
            return name.removeprefix(KIND_FIGURE)
    return VLLM_KIND


def _whole(x: float | None) -> int | None:
    return None if x is None or x <= 0 else int(x)


def _stats(url: str, row: PromRow, bounds: Mapping[str, float], kv: float | None) -> EngineStats:
    f = row.figures
    if f.get("up") == 0.0:
        return EngineStats(
            url=url, up=False, error=f"{url}: Prometheus' last scrape of it failed (up == 0)"
        )
    if not any(v is not None for k, v in f.items() if k not in _HELPERS) and not row.finished_per_s:
        return EngineStats(
            url=url,
            up=True,
            stats_disabled=True,
            error="exports no vllm:* metrics (started with --disable-log-stats?)",
        )
    running, decode = f.get("running"), f.get("generation_tokens")
    blocks, size = row.kv_blocks, row.kv_block_size
    capacity = blocks * size if blocks and size else f.get("kv_capacity")
    if size is None and f.get("kv_capacity") is not None:
        size = _whole(f.get("kv_block_size")) or 1  # counted in tokens: SGLang's pages of one
    return EngineStats(
        url=url,
        up=True,
        engine=kind_of(f),
        model=row.model,
        running=running,
        waiting=f.get("waiting"),
        waiting_capacity=f.get("waiting_capacity"),
        waiting_deferred=f.get("waiting_deferred"),
        kv_cache_usage_frac=kv,
        kv_capacity_tokens=_whole(capacity),
        kv_block_size=size,
        prompt_tok_per_s=f.get("prompt_tokens"),
        prompt_computed_tok_per_s=f.get("prompt_computed_tok_per_s"),
        prompt_cache_hit_frac=f.get("prompt_cache_hit_frac"),
        decode_tok_per_s=decode,
        decode_tok_per_s_per_seq=decode / running if decode is not None and running else None,
        preemptions_per_s=f.get("preemptions"),
        finished_per_s=dict(row.finished_per_s),
        admission_rejections_per_s=f.get("admission_rejections"),
        prefix_cache_hit_frac=f.get("prefix_hit_frac"),
        mean_prompt_tokens=f.get("mean_prompt_len"),
        mean_generation_tokens=f.get("mean_generation_len"),
        **_quantiles(f, bounds),
        ttft_mean_s=f.get("mean_ttft"),
        queue_time_mean_s=f.get("mean_queue_time"),
        prefill_time_mean_s=f.get("mean_prefill_time"),
        error=None if running is not None else NO_GAUGES,
    )


def replicas(answers: PromAnswers) -> list[DerivedReplica]:
    """Per-replica stats (a data-parallel server's engines as sub-rows), sorted by name; one
    down row named `prometheus` when Prometheus itself could not answer."""
    if answers.error is not None:
        down = EngineStats(url=answers.url, up=False, error=answers.error)
        return [DerivedReplica(answers.url, "prometheus", down)]
    bounds = answers.first_bounds
    servers: dict[str, PromRow] = {}
    engines: dict[str, list[PromRow]] = defaultdict(list)
    for row in answers.rows:
        if row.engine:
            engines[row.replica].append(row)
        else:
            servers[row.replica] = row
    out: list[DerivedReplica] = []
    for replica in sorted(servers):
        server = servers[replica]
        parts = sorted(engines.get(replica, ()), key=lambda e: e.engine)
        kv = _engines_kv(server, parts) if len(parts) > 1 else server.figures.get("kv_usage")
        stats = _stats(replica, server, bounds, kv)
        out.append(DerivedReplica(replica, replica, stats, restarts=server.figures.get("resets")))
        if len(parts) > 1 and stats.up:
            for row in parts:
                out.append(
                    DerivedReplica(
                        f"{replica}#engine={row.engine}",
                        f"{replica}#{row.engine}",
                        _stats(replica, row, bounds, row.figures.get("kv_usage")),
                        restarts=row.figures.get("resets"),
                        engine=row.engine,
                        parent=replica,
                    )
                )
    return out


def prometheus_replicas(raw: RawPoll) -> list[DerivedReplica]:
    """The replicas of a poll's Prometheus answers (none when it read no Prometheus): what the
    live fleet and its replay both feed to `FleetPipeline.update`."""
    return [] if raw.prometheus is None else replicas(raw.prometheus)
