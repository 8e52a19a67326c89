"""The fleet through PromQL: the queries, and their answers -> per-replica `EngineStats`. Pure.

A handful of instant queries per poll, whatever the fleet's size: each is an `or` of figures,
every figure aggregated `by (<replica label>, engine)` and tagged with a `llmtop_figure` label
(`label_replace`), so one answer carries one figure for every replica. Rates are `rate()` over
the window; quantiles are `histogram_quantile` over the window's bucket rates, and, as in
`derive`, a quantile inside the first bucket (ITL at a few ms) is replaced by the window's mean
capped at that bucket's bound (the bounds are read once). Old and new vLLM names are joined
with `or` (the new one wins). A data-parallel server's row sums its engines; its quantiles come
from one more query by replica alone, asked only when such a server exists.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmtop.core.derive import NO_GAUGES
from llmtop.core.engines import COUNTERS, GAUGES, HISTOGRAMS
from llmtop.core.fleet import DerivedReplica
from llmtop.core.snapshot import EngineStats
from llmtop.errors import UsageError

FIGURE = "llmtop_figure"
ENGINE = "engine"
QUANTILES: dict[str, tuple[float, ...]] = {
    "ttft": (0.5, 0.95, 0.99),
    "itl": (0.5, 0.95, 0.99),
    "e2e": (0.95,),
    "queue_time": (0.95,),
    "prefill_time": (0.95,),
}
"""The quantiles a replica row, its findings and `snapshot --json` read (each costs a series per
replica; the e2e and queue p50/p99 of a direct scrape are left unknown here)."""
MEANS = ("ttft", "itl", "queue_time", "prefill_time", "prompt_len", "generation_len")
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


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


@dataclass(frozen=True)
class Queries:
    """How to ask: the selector's matchers, the rate window and the label naming a replica."""

    matchers: str = ""
    window_s: float = 60.0
    replica_label: str = "instance"

    def series(self, name: str, extra: str = "") -> str:
        inside = ",".join(x for x in (self.matchers, extra) if x)
        return f"{name}{{{inside}}}" if inside else name

    def _any(self, names: Iterable[str], fn: str = "", suffix: str = "") -> str:
        """`fn(new[w]) or fn(old[w])`: the first name exported wins."""
        rng = f"[{self.window_s:g}s]" if fn else ""
        parts = [
            f"{fn}({self.series(n + suffix)}{rng})" if fn else self.series(n + suffix)
            for n in names
        ]
        return " or ".join(parts) if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def _by(self, *extra: str, engine: bool = True) -> str:
        labels = [self.replica_label, *([ENGINE] if engine else []), *extra]
        return "by (" + ", ".join(labels) + ")"

    def gauges(self) -> str:
        """Gauges, KV capacity from cache_config_info, Prometheus' `up`, counter resets."""
        r = self.replica_label
        capacity = self.series("vllm:num_requests_waiting_by_reason", 'reason="capacity"')
        figures = {
            "running": f"sum {self._by('model_name')} ({self._any(GAUGES['running'])})",
            "waiting": f"sum {self._by()} ({self._any(GAUGES['waiting'])})",
            "kv_usage": f"avg {self._by()} ({self._any(GAUGES['kv_usage'])})",
            "waiting_capacity": f"sum {self._by()} ({capacity})",
            "cache_config": f"max {self._by('num_gpu_blocks', 'block_size')} "
            f"({self.series('vllm:cache_config_info')})",
            "up": f"max by ({r}) ({self.series('up')})",
            "resets": f"sum {self._by()} "
            f"(resets({self.series('vllm:generation_tokens_total')}[{self.window_s:g}s]))",
        }
        return _tagged(figures)

    def rates(self) -> str:
        """Counter rates, finished requests by reason, prefix-cache hits, histogram means."""
        figures: dict[str, str] = {}
        for key in ("prompt_tokens", "generation_tokens", "preemptions"):
            figures[key] = f"sum {self._by()} ({self._any(COUNTERS[key], 'rate')})"
        figures["admission_rejections"] = (
            f"sum {self._by(engine=False)} ({self._any(COUNTERS['admission_rejections'], 'rate')})"
        )
        figures["finished"] = (
            f"sum {self._by('finished_reason')} "
            f"(rate({self.series('vllm:request_success_total')}[{self.window_s:g}s]))"
        )
        hits = f"sum {self._by()} ({self._any(COUNTERS['prefix_hits'], 'rate')})"
        queries = f"sum {self._by()} ({self._any(COUNTERS['prefix_queries'], 'rate')})"
        figures["prefix_hit_frac"] = f"{hits} / {queries}"
        for key in MEANS:
            total = f"sum {self._by()} ({self._any(HISTOGRAMS[key], 'rate', '_sum')})"
            count = f"sum {self._by()} ({self._any(HISTOGRAMS[key], 'rate', '_count')})"
            figures[f"mean:{key}"] = f"{total} / {count}"
        return _tagged(figures)

    def quantiles(self, *, by_engine: bool = True) -> str:
        """histogram_quantile per replica (and engine) over the window's bucket rates."""
        figures = {}
        for key, qs in QUANTILES.items():
            buckets = f"sum {self._by('le', engine=by_engine)} "
            buckets += f"({self._any(HISTOGRAMS[key], 'rate', '_bucket')})"
            for q in qs:
                figures[f"q:{key}:{q:g}"] = f"histogram_quantile({q:g}, {buckets})"
        return _tagged(figures)

    def bucket_bounds(self) -> str:
        """Every `le` of the quantile histograms (asked once: the first bounds)."""
        return _tagged(
            {
                key: f"count by (le) ({self._any(HISTOGRAMS[key], suffix='_bucket')})"
                for key in QUANTILES
            }
        )


def _tagged(figures: Mapping[str, str]) -> str:
    return " or ".join(
        f'label_replace({expr}, "{FIGURE}", "{name}", "", "")' for name, expr in figures.items()
    )


Figures = dict[str, float | None]


@dataclass
class _Row:
    figures: Figures
    model: str | None = None
    blocks: int | None = None
    block_size: int | None = None
    finished: dict[str, float] | None = None


def _value(item: Mapping[str, Any]) -> float | None:
    try:
        v = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def read_answers(
    answers: Iterable[Iterable[Mapping[str, Any]]], replica_label: str = "instance"
) -> dict[tuple[str, str], _Row]:
    """Result vectors -> (replica, engine) -> figures; engine "" = the replica as a whole."""
    rows: dict[tuple[str, str], _Row] = defaultdict(lambda: _Row({}))
    for result in answers:
        for item in result:
            labels = item.get("metric", {})
            figure, replica = labels.get(FIGURE), labels.get(replica_label)
            if not isinstance(figure, str) or not isinstance(replica, str):
                continue
            row = rows[(replica, str(labels.get(ENGINE, "")))]
            value = _value(item)
            if figure == "running" and labels.get("model_name"):
                row.model = str(labels["model_name"])
            if figure == "cache_config":
                try:
                    row.blocks = int(labels.get("num_gpu_blocks", ""))
                    row.block_size = int(labels.get("block_size", ""))
                except ValueError:
                    pass
                continue
            if figure == "finished":
                reason = str(labels.get("finished_reason", "unknown"))
                row.finished = row.finished or {}
                if value is not None:
                    row.finished[reason] = row.finished.get(reason, 0.0) + value
                continue
            if figure == "running" and row.figures.get("running") is not None and value is not None:
                value += row.figures["running"] or 0.0  # several model names on one engine
            row.figures[figure] = value
    return dict(rows)


def first_bounds(answer: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Histogram key -> its lowest finite bucket bound, from the `bucket_bounds` answer."""
    out: dict[str, float] = {}
    for item in answer:
        labels = item.get("metric", {})
        key, le = labels.get(FIGURE), labels.get("le")
        try:
            bound = float(le)
        except (TypeError, ValueError):
            continue
        if isinstance(key, str) and math.isfinite(bound):
            out[key] = min(bound, out.get(key, bound))
    return out


def server_figures(q: Queries) -> str:
    """Quantiles and means by replica alone: a data-parallel server's own row."""
    means = {
        f"mean:{key}": (
            f"sum {q._by(engine=False)} ({q._any(HISTOGRAMS[key], 'rate', '_sum')}) / "
            f"sum {q._by(engine=False)} ({q._any(HISTOGRAMS[key], 'rate', '_count')})"
        )
        for key in MEANS
    }
    return q.quantiles(by_engine=False) + " or " + _tagged(means)


def _quantile(f: Figures, key: str, q: float, bounds: Mapping[str, float]) -> float | None:
    """PromQL's quantile, or the window mean capped at the first bound when it falls there."""
    v = f.get(f"q:{key}:{q:g}")
    bound, mean = bounds.get(key), f.get(f"mean:{key}")
    if v is not None and bound is not None and v <= bound and mean is not None:
        return min(mean, bound)
    return v


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _merge(server: _Row, engines: list[_Row]) -> _Row:
    """A server's row from its engines: counts and rates summed, KV weighted by KV blocks."""
    out = _Row(dict(server.figures))
    own = len(engines) > 1  # a data-parallel server's quantiles and means come by replica
    keys = {k for e in engines for k in e.figures if not (own and k.startswith(("q:", "mean:")))}
    for k in keys - {"kv_usage", "up"}:
        if k not in out.figures or out.figures[k] is None:
            out.figures[k] = _sum(e.figures.get(k) for e in engines)
    kv = [(e.figures.get("kv_usage"), e.blocks) for e in engines]
    if all(v is not None for v, _ in kv):
        if all(b for _, b in kv):
            total = sum(b or 0 for _, b in kv)
            out.figures["kv_usage"] = sum((v or 0.0) * (b or 0) for v, b in kv) / total
        else:
            out.figures["kv_usage"] = sum(v or 0.0 for v, _ in kv) / len(kv)
    out.model = next((e.model for e in engines if e.model), None)
    if all(e.blocks and e.block_size for e in engines):
        out.blocks = sum(e.blocks or 0 for e in engines)
        out.block_size = engines[0].block_size
    finished: dict[str, float] = {}
    for e in engines:
        for reason, v in (e.finished or {}).items():
            finished[reason] = finished.get(reason, 0.0) + v
    out.finished = finished
    return out


def _stats(url: str, row: _Row, bounds: Mapping[str, float]) -> EngineStats:
    f = row.figures
    if f.get("up") == 0.0:
        return EngineStats(
            url=url, up=False, error=f"{url}: Prometheus' last scrape of it failed (up == 0)"
        )
    if not any(v is not None for k, v in f.items() if k != "up") and not row.finished:
        return EngineStats(
            url=url,
            up=True,
            stats_disabled=True,
            error="exports no vllm:* metrics (started with --disable-log-stats?)",
        )
    running, decode = f.get("running"), f.get("generation_tokens")
    capacity = row.blocks * row.block_size if row.blocks and row.block_size else None
    return EngineStats(
        url=url,
        up=True,
        model=row.model,
        running=running,
        waiting=f.get("waiting"),
        waiting_capacity=f.get("waiting_capacity"),
        kv_cache_usage_frac=f.get("kv_usage"),
        kv_capacity_tokens=capacity,
        kv_block_size=row.block_size,
        prompt_tok_per_s=f.get("prompt_tokens"),
        decode_tok_per_s=decode,
        decode_tok_per_s_per_seq=decode / running if decode is not None and running else None,
        preemptions_per_s=f.get("preemptions"),
        finished_per_s=dict(row.finished or {}),
        admission_rejections_per_s=f.get("admission_rejections"),
        prefix_cache_hit_frac=f.get("prefix_hit_frac"),
        mean_prompt_tokens=f.get("mean:prompt_len"),
        mean_generation_tokens=f.get("mean:generation_len"),
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
        ttft_mean_s=f.get("mean:ttft"),
        queue_time_mean_s=f.get("mean:queue_time"),
        prefill_time_mean_s=f.get("mean:prefill_time"),
        error=None if running is not None else NO_GAUGES,
    )


def data_parallel(rows: Mapping[tuple[str, str], _Row]) -> bool:
    """Whether a replica shows several engines (its own row then needs `server_figures`)."""
    seen: dict[str, int] = defaultdict(int)
    for replica, engine in rows:
        if engine:
            seen[replica] += 1
    return any(n > 1 for n in seen.values())


def replicas(
    rows: Mapping[tuple[str, str], _Row], bounds: Mapping[str, float]
) -> list[DerivedReplica]:
    """Per-replica stats (a data-parallel server's engines as sub-rows), sorted by name."""
    by_replica: dict[str, dict[str, _Row]] = defaultdict(dict)
    for (replica, engine), row in rows.items():
        by_replica[replica][engine] = row
    out: list[DerivedReplica] = []
    for replica in sorted(by_replica):
        parts = by_replica[replica]
        server = parts.pop("", _Row({}))
        engines = [parts[k] for k in sorted(parts)]
        merged = _merge(server, engines) if engines else server
        stats = _stats(replica, merged, bounds)
        restarts = merged.figures.get("resets")
        out.append(DerivedReplica(replica, replica, stats, restarts=restarts))
        if len(engines) > 1 and stats.up:
            for engine in sorted(parts):
                row = parts[engine]
                row.figures.setdefault("up", server.figures.get("up"))
                out.append(
                    DerivedReplica(
                        f"{replica}#engine={engine}",
                        f"{replica}#{engine}",
                        _stats(replica, row, bounds),
                        restarts=row.figures.get("resets"),
                        engine=engine,
                        parent=replica,
                    )
                )
    return out
