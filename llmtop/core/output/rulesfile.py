"""The rules file: the recorded figures and the alerts in one group (evaluated in order at one
time, so every alert reads this evaluation's figures), with a comment for what PromQL cannot
say, rendered as YAML. Pure.
"""

from __future__ import annotations

import json

from llmtop import __version__
from llmtop.core.alerts.figures import Recorded, figures
from llmtop.core.alerts.spec import RATE_SCRAPES, AlertSpec, duration
from llmtop.core.findings.catalog import alerts
from llmtop.core.findings.definition import AlertRule

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


def _alert(spec: AlertSpec, a: AlertRule) -> list[str]:
    lines = [
        *_comment(f"{a.finding} ({a.severity}, {a.bottleneck}): {a.alert.doc}.", "      "),
        f"      - alert: {a.name}",
        f"        expr: {_block(a.alert.expr, '          ')}",
    ]
    if not a.immediate:
        lines.append(f"        for: {duration(spec.health.fire_after_s)}")
        lines.append(f"        keep_firing_for: {duration(spec.health.clear_after_s)}")
    lines.append("        labels:")
    lines += [f"          {k}: {_scalar(v)}" for k, v in a.labels().items()]
    lines.append("        annotations:")
    for k, v in (("summary", a.alert.summary), ("action", a.action), ("llmtop", a.alert.llmtop)):
        lines.append(f"          {k}: {_scalar(v)}")
    return lines


def render(spec: AlertSpec, command: str = "llmtop rules") -> str:
    """The whole rules file."""
    made, left = alerts(spec)
    lines = [
        *header(spec, left, command),
        "groups:",
        f"  - name: {GROUP}",
        f"    interval: {duration(spec.interval_s)}",
        "    rules:",
    ]
    for r in figures(spec):
        lines += _recorded(r)
    for a in made:
        lines += _alert(spec, a)
    return "\n".join(lines) + "\n"
