"""The fleet through PromQL: the queries (their answers: `promql_answers`). Pure. What costs
llmtop is the series it decodes, so each query answers one per replica (the replicas: `up`
under the selector), every figure `by` the replica label and packed into the `FIGURES` label
(the design: docs/fleet.md); old and new vLLM names are joined with `or`, the new one winning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmtop.core.dialects.reverse import Reverse, reverse
from llmtop.core.vllm.names import (
    CACHE_CONFIG,
    COUNTERS,
    FINISHED,
    GAUGES,
    HISTOGRAMS,
    PROMPT_BY_SOURCE,
    WAITING_BY_REASON,
)
from llmtop.errors import UsageError

VLLM_KIND = "vllm"
LACKS = "llmtop_lacks:"
"""Stands before a vLLM name an engine has no series of: a selector that matches nothing, which
the rules (`core.alerts`) find and leave the rule out for, saying why."""
KIND = "llmtop_engine_kind"
"""The label that names the engine of a replica in the info answer (`Queries.info`'s kinds)."""
KIND_FIGURE = "kind_"
"""A replica row's figure `kind_<engine>` (1) says which engine it is, where not vLLM."""
PART = "llmtop_part"
"""The label that keeps an engine's counters apart under a range function where several of
them make one of vLLM's (llama.cpp's prefix-cache queries, SGLang's finished requests)."""
_PARTS: dict[str, tuple[str, ...]] = {}
"""A selector of several names -> a selector of each (`Queries.over`)."""
FIGURE = "llmtop_figure"
"""The label that names the figure of a series in the (few-series) info answer."""
FIGURES = "llmtop_figures"
"""The label of a packed series holding its figures' values, joined by commas."""
ENGINE = "engine"
INFO_EVERY_S = 60.0
"""Seconds between two readings of the slow-changing figures when nothing asks for one."""
QUANTILES: dict[str, tuple[float, ...]] = {
    "ttft": (0.5, 0.95, 0.99),
    "itl": (0.5, 0.95, 0.99),
    "e2e": (0.95,),
    "queue_time": (0.95,),
}
"""The quantiles the replica rows and the rules read. Each costs llmtop one label, but costs
Prometheus a `histogram_quantile` over every bucket's rate (most of its work for a poll), so
the queue p50 of a direct scrape (the latency panel's) is left unknown here."""
MEANS = ("ttft", "itl", "queue_time", "prefill_time", "prompt_len", "generation_len")
_SINCE_START = frozenset({"prompt_len", "generation_len"})
"""Means that fall back to the totals since start when nothing finished in the window."""
FINISHED_PREFIX = "finished_"
_MATCHER_PARTS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def alternatives(groups: Iterable[list[str]]) -> list[str]:
    """Selectors of alternative names in order, each once; those of a name the dialect lacks
    (`LACKS`) only when no other is left."""
    found: list[str] = []
    for group in groups:
        found += [x for x in group if x not in found]
    real = [x for x in found if not x.startswith(LACKS)]
    return real or found[:1]


def lacked(expr: str) -> list[str]:
    """The vLLM names an expression asks for that its dialect lacks, in order, each once."""
    return list(dict.fromkeys(re.findall(re.escape(LACKS) + r"([a-zA-Z0-9_:]+)", expr)))


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
    dialect: str = VLLM_KIND
    """The engine asked for (`core.dialects`): its own names stand for vLLM's."""

    def __post_init__(self) -> None:
        label = self.replica_label
        taken = {ENGINE, "le", FIGURE, FIGURES, PART, *self.figures((label,))}
        if not _LABEL.fullmatch(label) or label.startswith("__"):
            raise UsageError(f"--replica-label {label!r} is not a Prometheus label name")
        if label in taken or label.startswith(FINISHED_PREFIX):
            raise UsageError(f"--replica-label {label!r}: llmtop uses that name for a figure")

    def series(self, name: str, extra: str = "") -> str:
        """A selector of one vLLM name (in the dialect's own names: several of them as one
        `__name__` regex, added up where aggregated), or `LACKS` + the name when it has none."""
        if self.dialect == VLLM_KIND:
            inside = ",".join(x for x in (self.matchers, extra) if x)
            return f"{name}{{{inside}}}" if inside else name
        rev = reverse(self.dialect)
        found = self.selectors(name, extra)
        own = rev.own(name)
        return self._names(own, extra) if len(found) > 1 and own else found[0]

    def selectors(self, name: str, extra: str = "") -> list[str]:
        """One selector per own name a vLLM name has in the dialect, each an alternative (a
        family renamed between versions), or one `LACKS` name when it has none (vLLM's: the
        name itself)."""
        if self.dialect == VLLM_KIND:
            return [self.series(name, extra)]
        rev = reverse(self.dialect)
        if rev.speaks(name):  # its own name, asked as it is (a finding of this engine only)
            return [self._names((name,), extra)]
        if not name.startswith("vllm:"):  # up, the gateway's: the same in every dialect
            inside = ",".join(x for x in (self.matchers, extra) if x)
            return [f"{name}{{{inside}}}" if inside else name]
        if name in rev.summed:
            return [self._names(rev.summed[name], extra)]
        if name == FINISHED and name not in rev.names:
            return self._finished(rev, extra)
        own = rev.own(name)
        if not own:
            return [LACKS + name]
        return [self._names((n,), extra) for n in own]

    def _inside(self, extra: str) -> str:
        keep = "" if self.dialect == VLLM_KIND else reverse(self.dialect).keep
        return ",".join(x for x in (self.matchers, keep, extra) if x)

    def _names(self, names: Sequence[str], extra: str) -> str:
        """One selector of the series of any of `names` (added up where aggregated; a range
        function over it: `over`)."""
        inside = self._inside(extra)
        if len(names) == 1:
            return f"{names[0]}{{{inside}}}" if inside else names[0]
        regex = _string("|".join(_literal(n) for n in names))
        out = "{" + ",".join(x for x in (f"__name__=~{regex}", inside) if x) + "}"
        _PARTS[out] = tuple(self._names((n,), extra) for n in names)
        return out

    def over(self, fn: str, selector: str, window: str | None = None) -> str:
        """`fn(selector[window])`; over a selector of several names (`_names`), each name's
        apart and kept apart by a label, since a range function drops the name and two series
        left with one label set are an error (the aggregation around it adds them)."""
        rng = f"[{window or f'{self.window_s:g}s'}]"
        parts = _PARTS.get(selector)
        if parts is None:
            return f"{fn}({selector}{rng})"
        return (
            "("
            + " or ".join(
                f'label_replace({fn}({x}{rng}), "{PART}", "{i}", "", "")'
                for i, x in enumerate(parts)
            )
            + ")"
        )

    def _finished(self, rev: Reverse, extra: str) -> list[str]:
        """vLLM's finished requests (by reason where `extra` says) as the engine's own
        counters, each of which counts one reason."""
        reason: str | None = None
        kept = []
        for m in _split_matchers(extra):
            parts = _MATCHER_PARTS.fullmatch(m.strip())
            if parts is None or parts.group(1) != "finished_reason":
                kept.append(m.strip())
                continue
            _, op, value = parts.groups()
            if op == "=":
                reason = value.replace('\\"', '"').replace("\\\\", "\\")
            else:
                return [LACKS + FINISHED]  # a reason not known: its counters carry none
        own = rev.finished_for(reason)
        return [self._names(own, ",".join(kept))] if own else [LACKS + FINISHED]

    def _any(self, names: Iterable[str], fn: str = "", suffix: str = "", extra: str = "") -> str:
        """`fn(new[w]) or fn(old[w])`: the first name exported wins (a name the dialect lacks
        is left out while another is there)."""
        found = alternatives(self.selectors(n + suffix, extra) for n in names)
        parts = [self.over(fn, x) if fn else x for x in found]
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

    def replicas(self, reasons: Sequence[str] = (), among: str = "") -> tuple[Packed, Packed]:
        """Every replica's figures, one series per replica (see the module's docstring), as two
        queries to ask at once: the quantiles are most of Prometheus' work, and one query is
        evaluated on one core. `among` narrows the replicas (`and on (...)`, `unless on
        (...)`: those of one engine, in a fleet of several); a figure the engine lacks is not
        asked (it reads as unknown)."""
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
        if self.dialect != VLLM_KIND:
            del figures["engines"]  # a server's ranks are one engine (vLLM's alone split)
            figures.update(self.capacity())
            figures = {k: v for k, v in figures.items() if LACKS not in v}
        base = f"max by ({r}) ({self.series('up')})"
        if among:
            base = f"({base} {among})"
        return _packed_pair((r,), "up", base, figures)

    def carrier(self) -> str:
        """One series per replica that exports this engine's running gauge: how a replica's
        engine is told in a fleet of several."""
        return f"count by ({self.replica_label}) ({self._any(GAUGES['running'])})"

    def reasons(self, known: Sequence[str]) -> tuple[str, ...]:
        """The finished reasons this engine's figures are asked by: vLLM's (and an engine's
        that carries vLLM's label) as Prometheus knows them, else one per counter it has."""
        if self.dialect == VLLM_KIND or FINISHED in reverse(self.dialect).names:
            return tuple(known)
        return tuple(dict.fromkeys(reverse(self.dialect).finished.values()))

    def capacity(self) -> dict[str, str]:
        """The KV capacity of an engine that says it in gauges of its own (no cache_config_info):
        tokens, and tokens per block where it says one (the fleet's figures and the recorded
        rules, `alerts.figures`, both)."""
        own = reverse(self.dialect).capacity
        if own is None:
            return {}
        r = self.replica_label
        blocks, per_block = own
        total = f"sum by ({r}) ({self.series(blocks)})"
        if per_block is None:
            return {"kv_capacity": total}
        size = f"max by ({r}) ({self.series(per_block)})"
        return {"kv_capacity": f"{total} * on ({r}) {size}", "kv_block_size": size}

    def engines(self, reasons: Sequence[str] = ()) -> tuple[Packed, Packed]:
        """The engines of data-parallel servers only: one series per (replica, engine)."""
        r = self.replica_label
        running = self._any(GAUGES["running"])
        base = f"sum by ({r}, {ENGINE}) ({running}) and on ({r}) (count by ({r}) ({running}) > 1)"
        figures = self.figures((r, ENGINE), reasons)
        del figures["running"]  # the carrier
        return _packed_pair((r, ENGINE), "running", base, figures)

    def info(self, kinds: Sequence[str] = ()) -> str:
        """The slow-changing figures, one series each: the replicas, their KV blocks and model,
        the finished reasons, every `le` of the quantile histograms; with `kinds`, which
        replicas speak each of those other engines (and their models, reasons and bounds)."""
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
        out = " or ".join(
            f'label_replace({expr}, "{FIGURE}", "{name}", "", "")' for name, expr in figures.items()
        )
        return out + "".join(f" or {x}" for x in self._kinds(kinds))

    def _kinds(self, kinds: Sequence[str]) -> list[str]:
        """The info's parts for the other engines: which replicas speak each (`KIND`), their
        models, finished reasons and histogram bounds."""
        out = []
        if kinds:  # vLLM's too: a replica exporting two engines' families is read as the first
            kind_of = f'label_replace({self.carrier()}, "{KIND}", "{VLLM_KIND}", "", "")'
            out.append(f'label_replace({kind_of}, "{FIGURE}", "kind", "", "")')
        for kind in kinds:
            q = Queries(self.matchers, self.window_s, self.replica_label, kind)
            r = self.replica_label
            running = q._any(GAUGES["running"])
            parts = {
                "kind": f'label_replace({q.carrier()}, "{KIND}", "{kind}", "", "")',
                "model": f"count by ({r}, model_name) ({running})",
            }
            if FINISHED in reverse(kind).names:
                parts["reason"] = f"count by (finished_reason) ({q.series(FINISHED)})"
            for key in QUANTILES:
                parts[f"bounds_{key}"] = (
                    f"count by (le) ({q._any(HISTOGRAMS[key], suffix='_bucket')})"
                )
            out += [
                f'label_replace({expr}, "{FIGURE}", "{name}", "", "")'
                for name, expr in parts.items()
                if LACKS not in expr
            ]
        return out


@dataclass(frozen=True)
class Packed:
    """A packed query and the figures its answer's `FIGURES` label holds, in order."""

    expr: str
    names: tuple[str, ...]


def _packed_pair(
    labels: Sequence[str], carrier: str, base: str, figures: Mapping[str, str]
) -> tuple[Packed, Packed]:
    """The figures packed as two queries: the quantiles, and the rest."""
    quantiles = {k: v for k, v in figures.items() if k.startswith("q_")}
    rest = {k: v for k, v in figures.items() if k not in quantiles}
    return _packed(labels, carrier, base, rest), _packed(labels, carrier, base, quantiles)


def _packed(labels: Sequence[str], carrier: str, base: str, figures: Mapping[str, str]) -> Packed:
    """`base` as the label `carrier`, then each figure joined on as a label of its own, then
    all of them written into `FIGURES` and the rest dropped."""
    by = ", ".join(labels)
    out = f"count_values by ({by}) ({_string(carrier)}, {base})"
    for name, expr in figures.items():
        value = f"({expr}) or (NaN * ({base}))"
        out += f" * on ({by}) group_left ({name}) count_values by ({by}) ({_string(name)}, {value})"
    names = (carrier, *figures)
    sources = ", ".join(_string(n) for n in names)
    joined = f'label_join({out}, {_string(FIGURES)}, ",", {sources})'
    return Packed(f"max by ({by}, {FIGURES}) ({joined})", names)
