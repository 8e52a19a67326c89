"""The rules file: the recorded figures and the alerts in one group per engine (evaluated in
order at one time, so every alert reads this evaluation's figures), with a comment for what
PromQL cannot say and what an engine lacks, rendered as YAML. Pure.

Each engine's group reads its own series (`AlertSpec.dialect`: the queries in its own names)
and records its figures under its own prefix (`llmtop:sglang_*`), so its alerts, the fleet's
comparisons among them, see that engine's replicas alone; a rule whose inputs the engine lacks
is left out, with why. The gateway's own rules are written once, in the first group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from llmtop import __version__
from llmtop.core.alerts.figures import P, Recorded, figures
from llmtop.core.alerts.spec import RATE_SCRAPES, AlertSpec, duration
from llmtop.core.dialects.catalog import lacking
from llmtop.core.dialects.engines import BY_KIND, DIALECTS, VLLM
from llmtop.core.dialects.reverse import reverse, why_lacks
from llmtop.core.findings.catalog import DEFINITIONS, alerts
from llmtop.core.findings.definition import AlertRule
from llmtop.core.promql.promql import LACKS, VLLM_KIND, lacked
from llmtop.errors import UsageError

GROUP = "llmtop"


def _scalar(text: str) -> str:
    """A YAML scalar: JSON's double-quoted string is one (every character escaped alike)."""
    return json.dumps(text, ensure_ascii=False)


def _block(text: str, indent: str) -> str:
    """A literal block scalar (`|-`), for PromQL: read as written, line by line."""
    return "|-\n" + "\n".join(indent + line for line in text.splitlines())


def _comment(text: str, indent: str, width: int = 96, hang: str = "") -> list[str]:
    """`text` as `#` lines wrapped at `width` (lines after the first indented by `hang`)."""
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(indent) + 2 + len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return [f"{indent}# {hang if i else ''}{x}" for i, x in enumerate(lines)]


def header(spec: AlertSpec, left: dict[str, str], command: str) -> list[str]:
    """What the file was made from and how its timing relates to llmtop's."""
    h = spec.health
    w, every = duration(spec.window_s), duration(spec.interval_s)
    thresholds = ", ".join(
        [f"[slo] ttft_s {h.slo.ttft_s:g}", f"itl_s {h.slo.itl_s:g}"]
        + [
            f"{k} {getattr(h, k):g}"
            for k in (
                "queue_wait_slo_s",
                "kv_high_frac",
                "kv_target_frac",
                "error_rate_max",
                "stale_after_s",
                "scheduler_stuck_after_s",
                "critical_slo_factor",
            )
        ]
    )
    selectors = (
        f"vLLM {{{spec.vllm_matchers}}}, gateway {{{spec.gateway_matchers}}}, replica label "
        f"{spec.r}"
    )
    lines = [
        f"# Made by `{command}` (llmtop {__version__}) from llmtop's health rules",
        "# and thresholds: regenerate it rather than edit it (docs/alerts.md).",
        f"# Series: {selectors}.",
        *_comment(f"Thresholds: {thresholds}.", ""),
        *_comment(
            f"Timing: evaluated every {every}; rates and quantiles over {w} (llmtop's "
            f"{h.window_s:g} s window, or {RATE_SCRAPES} scrapes when they are sparser). "
            f"An alert fires once its condition has held for: {duration(h.fire_after_s)} "
            "(llmtop's fire_after_s; at an evaluation interval longer than that, at the second "
            "evaluation that holds) and resolves once it has been false keep_firing_for: "
            f"{duration(h.clear_after_s)} (clear_after_s; Prometheus >= 2.42). Findings llmtop "
            "raises at once (a target down, a paused gateway) have neither.",
            "",
        ),
        "# Not expressed in PromQL:",
    ]
    for finding, why in sorted(left.items()):
        lines += _comment(f"- {finding}: {why}", "", hang="  ")
    return lines


def _recorded(r: Recorded) -> list[str]:
    return [
        *_comment(r.doc, "      "),
        f"      - record: {r.name}",
        f"        expr: {_block(r.expr, '          ')}",
    ]


def _alert(spec: AlertSpec, a: AlertRule, engine: bool = False) -> list[str]:
    lines = [
        *_comment(f"{a.finding} ({a.severity}, {a.bottleneck}): {a.alert.doc}.", "      "),
        f"      - alert: {a.name}",
        f"        expr: {_block(a.alert.expr, '          ')}",
    ]
    if not a.immediate:
        lines.append(f"        for: {duration(spec.health.fire_after_s)}")
        lines.append(f"        keep_firing_for: {duration(spec.health.clear_after_s)}")
    lines.append("        labels:")
    labels = a.labels()
    if engine:
        labels["engine"] = spec.dialect
    lines += [f"          {k}: {_scalar(v)}" for k, v in labels.items()]
    lines.append("        annotations:")
    for k, v in (("summary", a.alert.summary), ("action", a.action), ("llmtop", a.alert.llmtop)):
        lines.append(f"          {k}: {_scalar(v)}")
    return lines


def render(spec: AlertSpec, command: str = "llmtop rules", dialects: Sequence[str] = ()) -> str:
    """The whole rules file: one group per engine of `dialects` (none: `spec.dialect`'s)."""
    kinds = tuple(dict.fromkeys(dialects)) or (spec.dialect,)
    several = len(kinds) > 1
    groups = [
        group(
            replace(spec, dialect=k, beside=kinds[1:] if i == 0 else (), gateway_part=i == 0),
            several,
        )
        for i, k in enumerate(kinds)
    ]
    everywhere = {
        k: why
        for k, why in groups[0].not_expressed.items()
        if all(k in g.not_expressed for g in groups)
    }
    lines = header(spec, everywhere, command)
    if kinds != (VLLM_KIND,):
        lines += _comment(
            "Engines: "
            + "; ".join(
                f"{BY_KIND[g.kind].title}, group {g.name}, figures {g.prefix}*" for g in groups
            )
            + ". The gateway's own rules are in the first group.",
            "",
        )
    lines.append("groups:")
    for g in groups:
        lines += [
            f"  - name: {g.name}",
            f"    interval: {duration(spec.interval_s)}",
            "    rules:",
        ]
        if g.left:
            lines.append(f"      # Left out for {BY_KIND[g.kind].title} (it lacks their inputs):")
            for name, why in g.left.items():
                lines += _comment(f"- {name}: {why}", "      ", hang="  ")
        for r in g.records:
            lines += _recorded(r)
        for a in g.alerts:
            lines += _alert(g.spec, a, a.finding in g.labelled)
    return "\n".join(lines) + "\n"


def dialects(text: str) -> tuple[str, ...]:
    """`--dialect`'s value: engine kinds, comma-separated, or `all`; a one-line error naming
    the choices for an unknown one."""
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if words == ["all"]:
        return tuple(d.kind for d in DIALECTS)
    for w in words:
        if w not in BY_KIND:
            raise UsageError(f"--dialect {w!r}: one of {', '.join(BY_KIND)}, or all")
    if not words:
        raise UsageError(f"--dialect is empty: one of {', '.join(BY_KIND)}, or all")
    return tuple(dict.fromkeys(words))


@dataclass(frozen=True)
class Group:
    """One engine's rules: what it records, its alerts, and what is left out and why."""

    spec: AlertSpec
    records: tuple[Recorded, ...]
    alerts: tuple[AlertRule, ...]
    left: dict[str, str]
    """A recorded figure's or a finding's name -> why the engine cannot have it."""
    not_expressed: dict[str, str]
    """The findings PromQL cannot say at all (the file's header)."""
    labelled: frozenset[str]
    """The findings whose alerts carry `engine`: those about an engine, in a file of another
    engine than vLLM or of several."""

    @property
    def kind(self) -> str:
        return self.spec.dialect

    @property
    def name(self) -> str:
        return GROUP if self.kind == VLLM_KIND else f"{GROUP}-{self.kind}"

    @property
    def prefix(self) -> str:
        return self.spec.p


_TOKEN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_OWN_REGEX = '__name__=~"vllm:.+"'
"""The one vLLM prefix a finding writes itself (stats-disabled: any vllm:* series)."""


def group(spec: AlertSpec, several: bool = False) -> Group:
    """`spec.dialect`'s rules. Its selectors are already the engine's own (`AlertSpec.vllm`);
    the findings write the recorded figures under vLLM's prefix (`figures.P`), moved here to
    the engine's. Left out: a recorded figure whose inputs it lacks (`LACKS`), a finding whose
    needs it lacks (the reason `snapshot --json` gives), one that reads a family it lacks
    (vLLM's own: engine_healthy, NIXL's). A rule reading a recorded figure left out reads it as
    absent, as llmtop's check reads the figure as None. Another engine's own finding (llama.cpp's
    estimate) is in that engine's group alone."""
    kind = spec.dialect
    left: dict[str, str] = {}
    records: list[Recorded] = []
    for r in figures(spec):
        missing = lacked(r.expr)
        if missing:
            left[r.name] = why_lacks(kind, missing)
        else:
            records.append(r)
    needs = {d.rule.id: d.needs for d in DEFINITIONS}
    made, not_expressed = alerts(spec)
    kept: list[AlertRule] = []
    labelled: set[str] = set()
    for a in made:
        tokens = set(_TOKEN.findall(a.alert.expr))
        owner = _owner(tokens)
        if owner is not None and owner != kind:
            continue  # another engine's own finding
        any_engine = _OWN_REGEX in a.alert.expr  # any engine's series at all: stats-disabled
        engine_bound = not any_engine and (
            owner is not None or any(t.startswith((P, "vllm:", LACKS)) for t in tokens)
        )
        if not spec.gateway_part and not engine_bound:
            continue  # the gateway's, or about every engine of the file: in the first group
        a = _moved(spec, a)
        why = lacking(kind, needs.get(a.finding, ()))
        if why is None and lacked(a.alert.expr):
            why = why_lacks(kind, lacked(a.alert.expr))
        if why is not None:
            left[a.finding] = why
            continue
        kept.append(a)
        if engine_bound:
            labelled.add(a.finding)
    return Group(
        spec,
        tuple(records),
        tuple(kept),
        left,
        not_expressed,
        frozenset(labelled) if several or kind != VLLM_KIND else frozenset(),
    )


def _owner(tokens: set[str]) -> str | None:
    """The engine other than vLLM whose own families an expression names, if any."""
    for d in DIALECTS:
        if d.kind != VLLM_KIND and any(reverse(d.kind).speaks(t) for t in tokens):
            return d.kind
    return None


def _moved(spec: AlertSpec, a: AlertRule) -> AlertRule:
    """An alert with vLLM's recorded prefix moved to the engine's; one that reads "any vllm:*
    series" (stats-disabled) reads any of the file's engines' own, with their switches."""
    kinds = (spec.dialect, *spec.beside)
    if kinds == (VLLM_KIND,):
        return a
    prefixes = [reverse(k).prefix for k in kinds]
    own = (
        f'__name__=~"{"|".join(prefixes)}.+"'
        if len(kinds) == 1
        else ("__name__=~" + '"(' + "|".join(prefixes) + ').+"')
    )
    stars = " or ".join(f"{x}*" for x in prefixes)
    p = spec.p

    def moved(text: str) -> str:
        return text.replace(P, p).replace(_OWN_REGEX, own).replace("vllm:*", stars)

    advice = a.advice
    if _OWN_REGEX in a.alert.expr and advice == VLLM.metrics_switch:
        switches = [BY_KIND[k].metrics_switch for k in kinds]
        advice = (
            switches[0]
            if len(kinds) == 1
            else "; ".join(f"{BY_KIND[k].title}: {x}" for k, x in zip(kinds, switches, strict=True))
        )
    al = a.alert
    alert = replace(
        al,
        expr=moved(al.expr),
        summary=moved(al.summary),
        llmtop=moved(al.llmtop),
        action=moved(al.action),
    )
    return replace(a, alert=alert, advice=advice)
