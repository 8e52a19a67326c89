"""The fleet through PromQL: the queries, and their answers -> per-replica `EngineStats`. Pure.

What costs llmtop is the number of result series it decodes, not what Prometheus computes, so
the answers carry one series per replica with every figure as a label. Each figure is
aggregated `by (<replica label>)` (a gauge, a rate, a window mean, a `histogram_quantile` over
the window's bucket rates), made a label by `count_values("<figure>", ...)` (Prometheus writes
the value in Go's shortest round-trip format: nothing is lost) and joined onto the replica's
`up` with `* on (<replica>) group_left (<figure>)`; a figure a replica lacks is NaN-filled
(`or NaN * up`) so that the join keeps the replica. A poll is two such queries asked at once
(the quantiles, most of Prometheus' work, and the rest: Prometheus evaluates a query on one
core): a hundred replicas are two hundred series (with one series per figure, ~3,200).

The replicas are those of `up` under the selector, so the selector names target labels (job,
namespace, ...). Slow-changing things come from a third query (`Info`), asked at the start,
every `INFO_EVERY_S`, and when a replica appears, restarts, or shows a finished reason not known
yet: KV blocks (cache_config_info), the model, the finished reasons (each one a figure) and the
histograms' first bucket bounds. A data-parallel server (several `engine` values) gets its
engines' rows from one more pair of packed queries by (replica, engine), restricted to such
servers and asked only when one exists; the server's own row keeps its figures by replica (its
quantiles are the whole server's) and its KV usage is weighted by its engines' KV blocks.

As in `derive`, a quantile inside the first bucket (ITL at a few ms) is the window's mean capped
at that bucket's bound; token means and the cache shares fall back to the totals since start
when the window saw nothing. Old and new vLLM names are joined with `or` (the new one wins).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmtop.core.derive import NO_GAUGES
from llmtop.core.engines import (
    CACHE_CONFIG,
    COUNTERS,
    FINISHED,
    GAUGES,
    HISTOGRAMS,
    PROMPT_BY_SOURCE,
    WAITING_BY_REASON,
)
from llmtop.core.fleet import DerivedReplica
from llmtop.core.raw import PromAnswers, PromRow, RawPoll
from llmtop.core.snapshot import EngineStats
from llmtop.errors import UsageError

FIGURE = "llmtop_figure"
"""The label that names the figure of a series in the (few-series) info answer."""
ENGINE = "engine"
INFO_EVERY_S = 60.0
"""Seconds between two readings of the slow-changing figures when nothing asks for one."""
QUANTILES: dict[str, tuple[float, ...]] = {
    "ttft": (0.5, 0.95, 0.99),
    "itl": (0.5, 0.95, 0.99),
    "e2e": (0.95,),
    "queue_time": (0.95,),
    "prefill_time": (0.95,),
}
"""The quantiles the replica rows and the rules read. Each costs llmtop one label, but costs
Prometheus a `histogram_quantile` over every bucket's rate (most of its work for a poll), so
the e2e p50/p99 and the queue p50/p99 of a direct scrape are left unknown here."""
MEANS = ("ttft", "itl", "queue_time", "prefill_time", "prompt_len", "generation_len")
_SINCE_START = frozenset({"prompt_len", "generation_len"})
"""Means that fall back to the totals since start when nothing finished in the window."""
FINISHED_PREFIX = "finished_"
_HELPERS = ("up", "engines", "new_reasons")
"""Figures only the source reads (to find down, data-parallel and changed replicas)."""
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def quantile_figure(key: str, q: float) -> str:
    """The figure (label) name of one quantile: q_ttft_p95."""
    return f"q_{key}_p{round(q * 100)}"


def selector_matchers(selector: str | None) -> str:
    """The matchers inside `{...}` (checked), to put in every series selector; "" for none."""
    if not selector or not selector.strip():
        return ""
    s = selector.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise UsageError(f"--selector must look like '{{job=\"vllm\"}}', got {selector!r}")
    inner = s[1:-1].strip().rstrip(",")
    parts = list(_split_matchers(inner))
    if not all(_MATCHER.fullmatch(p) for p in parts):
        raise UsageError(f'--selector {selector!r}: each matcher is label="value" (or !=, =~, !~)')
    return ",".join(p.strip() for p in parts)


def _split_matchers(inner: str) -> Iterable[str]:
    """Split on commas outside quotes."""
    start, quoted, escaped = 0, False, False
    for i, ch in enumerate(inner):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            yield inner[start:i]
            start = i + 1
    if inner[start:].strip():
        yield inner[start:]


def _string(text: str) -> str:
    """A PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(text: str) -> str:
    """`text` as a literal inside an RE2 pattern (only its metacharacters escaped)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


@dataclass(frozen=True)
class Queries:
    """How to ask: the selector's matchers, the rate window and the label naming a replica."""

    matchers: str = ""
    window_s: float = 60.0
    replica_label: str = "instance"

    def __post_init__(self) -> None:
        label = self.replica_label
        taken = {ENGINE, "le", FIGURE, *self.figures((label,))}
        if not _LABEL.fullmatch(label) or label.startswith("__"):
            raise UsageError(f"--replica-label {label!r} is not a Prometheus label name")
        if label in taken or label.startswith(FINISHED_PREFIX):
            raise UsageError(f"--replica-label {label!r}: llmtop uses that name for a figure")

    def series(self, name: str, extra: str = "") -> str:
        inside = ",".join(x for x in (self.matchers, extra) if x)
        return f"{name}{{{inside}}}" if inside else name

    def _any(self, names: Iterable[str], fn: str = "", suffix: str = "", extra: str = "") -> str:
        """`fn(new[w]) or fn(old[w])`: the first name exported wins."""
        rng = f"[{self.window_s:g}s]" if fn else ""
        parts = [
            f"{fn}({self.series(n + suffix, extra)}{rng})" if fn else self.series(n + suffix, extra)
            for n in names
        ]
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def figures(self, labels: Sequence[str], reasons: Sequence[str] = ()) -> dict[str, str]:
        """Figure name -> its expression, one value per `labels` (the replica, or the replica
        and its engine); finished reasons as `finished_<i>` in the order of `reasons`."""
        by = "by (" + ", ".join(labels) + ")"

        def rate(names: Iterable[str], suffix: str = "", extra: str = "") -> str:
            return f"sum {by} ({self._any(names, 'rate', suffix, extra)})"

        def total(names: Iterable[str], suffix: str = "", extra: str = "") -> str:
            return f"sum {by} ({self._any(names, '', suffix, extra)})"

        def share(part: str, whole: str, part_total: str, whole_total: str) -> str:
            """part/whole over the window, else since start (the window saw none)."""
            return f"({part} / ({whole} > 0)) or ({part_total} / ({whole_total} > 0))"

        hits, queries = COUNTERS["prefix_hits"], COUNTERS["prefix_queries"]
        cache_hit = 'source="local_cache_hit"'
        generation = self.series(COUNTERS["generation_tokens"][0])
        out = {
            "running": total(GAUGES["running"]),
            "waiting": total(GAUGES["waiting"]),
            "waiting_capacity": total([WAITING_BY_REASON], extra='reason="capacity"'),
            "waiting_deferred": total([WAITING_BY_REASON], extra='reason="deferred"'),
            "kv_usage": f"avg {by} ({self._any(GAUGES['kv_usage'])})",
            "resets": f"sum {by} (resets({generation}[{self.window_s:g}s]))",
            "prompt_tokens": rate(COUNTERS["prompt_tokens"]),
            "generation_tokens": rate(COUNTERS["generation_tokens"]),
            "preemptions": rate(COUNTERS["preemptions"]),
            "prefix_hit_frac": share(rate(hits), rate(queries), total(hits), total(queries)),
            "prompt_cache_hit_frac": share(
                rate([PROMPT_BY_SOURCE], extra=cache_hit),
                rate([PROMPT_BY_SOURCE]),
                total([PROMPT_BY_SOURCE], extra=cache_hit),
                total([PROMPT_BY_SOURCE]),
            ),
            "prompt_computed_tok_per_s": rate([PROMPT_BY_SOURCE], extra='source="local_compute"'),
        }
        for i, reason in enumerate(reasons):
            matcher = f"finished_reason={_string(reason)}"
            out[f"{FINISHED_PREFIX}{i}"] = rate([FINISHED], extra=matcher)
        for key in MEANS:
            h = HISTOGRAMS[key]
            if key in _SINCE_START:
                out[f"mean_{key}"] = share(
                    rate(h, "_sum"), rate(h, "_count"), total(h, "_sum"), total(h, "_count")
                )
            else:
                out[f"mean_{key}"] = f"{rate(h, '_sum')} / {rate(h, '_count')}"
        for key, qs in QUANTILES.items():
            buckets = f"sum by ({', '.join(labels)}, le) "
            buckets += f"({self._any(HISTOGRAMS[key], 'rate', '_bucket')})"
            for q in qs:
                out[quantile_figure(key, q)] = f"histogram_quantile({q:g}, {buckets})"
        return out

    def replicas(self, reasons: Sequence[str] = ()) -> tuple[str, str]:
        """Every replica's figures, one series per replica (see the module's docstring), as two
        queries to ask at once: the quantiles are most of Prometheus' work, and one query is
        evaluated on one core."""
        r = self.replica_label
        running = self._any(GAUGES["running"])
        known = "|".join(_literal(x) for x in reasons)
        unknown = self.series(FINISHED, f"finished_reason!~{_string(known)}" if reasons else "")
        figures = {
            "engines": f"count by ({r}) ({running})",
            "new_reasons": f"count by ({r}) ({unknown})",
            "admission_rejections": f"sum by ({r}) "
            f"({self._any(COUNTERS['admission_rejections'], 'rate')})",
            **self.figures((r,), reasons),
        }
        base = f"max by ({r}) ({self.series('up')})"
        return _packed_pair((r,), "up", base, figures)

    def engines(self, reasons: Sequence[str] = ()) -> tuple[str, str]:
        """The engines of data-parallel servers only: one series per (replica, engine)."""
        r = self.replica_label
        running = self._any(GAUGES["running"])
        base = f"sum by ({r}, {ENGINE}) ({running}) and on ({r}) (count by ({r}) ({running}) > 1)"
        figures = self.figures((r, ENGINE), reasons)
        del figures["running"]  # the carrier
        return _packed_pair((r, ENGINE), "running", base, figures)

    def info(self) -> str:
        """The slow-changing figures, one series each: the replicas, their KV blocks and model,
        the finished reasons, every `le` of the quantile histograms."""
        r = self.replica_label
        running = self._any(GAUGES["running"])
        figures = {
            "replica": f"max by ({r}) ({self.series('up')})",
            "cache_config": f"max by ({r}, {ENGINE}, num_gpu_blocks, block_size) "
            f"({self.series(CACHE_CONFIG)})",
            "model": f"count by ({r}, model_name) ({running})",
            "reason": f"count by (finished_reason) ({self.series(FINISHED)})",
        }
        for key in QUANTILES:
            figures[f"bounds_{key}"] = (
                f"count by (le) ({self._any(HISTOGRAMS[key], suffix='_bucket')})"
            )
        return " or ".join(
            f'label_replace({expr}, "{FIGURE}", "{name}", "", "")' for name, expr in figures.items()
        )


def _packed_pair(
    labels: Sequence[str], carrier: str, base: str, figures: Mapping[str, str]
) -> tuple[str, str]:
    """The figures packed as two queries: the quantiles, and the rest."""
    quantiles = {k: v for k, v in figures.items() if k.startswith("q_")}
    rest = {k: v for k, v in figures.items() if k not in quantiles}
    return _packed(labels, carrier, base, rest), _packed(labels, carrier, base, quantiles)


def _packed(labels: Sequence[str], carrier: str, base: str, figures: Mapping[str, str]) -> str:
    """`base` as the label `carrier`, then each figure joined on as a label of its own."""
    by = ", ".join(labels)
    out = f"count_values by ({by}) ({_string(carrier)}, {base})"
    for name, expr in figures.items():
        value = f"({expr}) or (NaN * ({base}))"
        out += f" * on ({by}) group_left ({name}) count_values by ({by}) ({_string(name)}, {value})"
    return out


# ---- answers -> rows ---------------------------------------------------------------------------


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
    return Info(frozenset(replicas), all_blocks, models, tuple(sorted(reasons)), bounds)


_NOT_FINITE = frozenset({"NaN", "+Inf", "-Inf"})
"""How Prometheus writes a value that is unknown (nothing in the window) or unbounded."""


def _figures(labels: Mapping[str, str], skip: frozenset[str]) -> dict[str, float | None]:
    """One packed series' labels -> figures; the cheap path, then one label at a time when a
    value is not a plain number."""
    try:
        return {
            k: None if v in _NOT_FINITE else float(v) for k, v in labels.items() if k not in skip
        }
    except (TypeError, ValueError):
        return {k: _number(v) for k, v in labels.items() if k not in skip}


def read_rows(
    answers: Iterable[Iterable[Mapping[str, Any]]],
    info: Info,
    replica_label: str = "instance",
    *,
    by_engine: bool = False,
) -> list[PromRow]:
    """Packed answers (the `Queries.replicas` or `.engines` pair, asked with `info.reasons`)
    -> one row per replica (or engine), its figures from every answer."""
    finished = {f"{FINISHED_PREFIX}{i}": reason for i, reason in enumerate(info.reasons)}
    skip = frozenset({replica_label, ENGINE})
    merged: dict[tuple[str, str], dict[str, float | None]] = {}
    for answer in answers:
        for item in answer:
            labels = item.get("metric")
            if not isinstance(labels, dict) or not labels.get(replica_label):
                continue
            key = (str(labels[replica_label]), str(labels.get(ENGINE, "")) if by_engine else "")
            figures = _figures(labels, skip)
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


# ---- rows -> replicas --------------------------------------------------------------------------


_QUANTILE_KEYS = {
    (key, q): (quantile_figure(key, q), f"mean_{key}") for key, qs in QUANTILES.items() for q in qs
}


def _quantile(
    f: Mapping[str, float | None], key: str, q: float, bounds: Mapping[str, float]
) -> float | None:
    """PromQL's quantile, or the window mean capped at the first bound when it falls there."""
    names = _QUANTILE_KEYS.get((key, q))
    if names is None:
        return None  # not asked (a direct scrape's e2e p50, say): unknown
    v = f.get(names[0])
    if v is None:
        return None
    bound, mean = bounds.get(key), f.get(names[1])
    if bound is not None and v <= bound and mean is not None:
        return min(mean, bound)
    return v


def _engines_kv(server: PromRow, engines: Sequence[PromRow]) -> float | None:
    """A data-parallel server's KV usage: its engines' weighted by their KV blocks."""
    kv = [(e.figures.get("kv_usage"), e.kv_blocks) for e in engines]
    if not all(v is not None for v, _ in kv):
        return server.figures.get("kv_usage")
    if all(b for _, b in kv):
        total = sum(b or 0 for _, b in kv)
        return sum((v or 0.0) * (b or 0) for v, b in kv) / total
    return sum(v or 0.0 for v, _ in kv) / len(kv)


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
    return EngineStats(
        url=url,
        up=True,
        model=row.model,
        running=running,
        waiting=f.get("waiting"),
        waiting_capacity=f.get("waiting_capacity"),
        waiting_deferred=f.get("waiting_deferred"),
        kv_cache_usage_frac=kv,
        kv_capacity_tokens=blocks * size if blocks and size else None,
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
        ttft_p50_s=_quantile(f, "ttft", 0.5, bounds),
        ttft_p95_s=_quantile(f, "ttft", 0.95, bounds),
        ttft_p99_s=_quantile(f, "ttft", 0.99, bounds),
        itl_p50_s=_quantile(f, "itl", 0.5, bounds),
        itl_p95_s=_quantile(f, "itl", 0.95, bounds),
        itl_p99_s=_quantile(f, "itl", 0.99, bounds),
        e2e_p50_s=_quantile(f, "e2e", 0.5, bounds),
        e2e_p95_s=_quantile(f, "e2e", 0.95, bounds),
        e2e_p99_s=_quantile(f, "e2e", 0.99, bounds),
        queue_time_p50_s=_quantile(f, "queue_time", 0.5, bounds),
        queue_time_p95_s=_quantile(f, "queue_time", 0.95, bounds),
        queue_time_p99_s=_quantile(f, "queue_time", 0.99, bounds),
        prefill_time_p95_s=_quantile(f, "prefill_time", 0.95, bounds),
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
