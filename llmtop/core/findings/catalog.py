"""Every finding llmtop has, collected from the finding modules in one stated order, and the
registries made from their definitions: the rules the pipelines evaluate, the guide (README's
table and the `?` screen), the alerts of a rules file and the findings PromQL cannot say. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.base.snapshot import Finding
from llmtop.core.findings import (
    batching,
    degraded,
    features,
    fleet,
    gateway,
    gpu,
    kv_cache,
    liveness,
    peers,
    refusals,
    replicas,
    slots,
    vllm_state,
)
from llmtop.core.findings.definition import AlertRule, Definition, Guide, GuideRow
from llmtop.core.health.rulebase import Context, FleetView, Hysteresis, Rule
from llmtop.core.health.thresholds import FleetRules, HealthSettings

ENGINE_FAMILIES = (
    liveness,
    kv_cache,
    degraded,
    slots,
    batching,
    refusals,
    gateway,
    replicas,
    peers,
    vllm_state,
    features,
    gpu,
)
"""The modules of the findings judged on an engine's `Context`, in the order they are judged
(findings of one severity are listed in this order)."""
AROUND = (gateway, replicas, peers, gpu)
"""Those about what surrounds the engines, the gateway and the GPUs: a fleet replica's own
Context carries neither (the fleet's edge pipeline judges these)."""

RULES: tuple[Rule[Context], ...] = tuple(d.rule for m in ENGINE_FAMILIES for d in m.FINDINGS)
REPLICA_RULES: tuple[Rule[Context], ...] = tuple(
    d.rule
    for m in ENGINE_FAMILIES
    if m not in AROUND
    for d in m.FINDINGS
    if d is not vllm_state.ENGINE_RESTARTED  # a replica's restart is the fleet's event
)
"""The rules a fleet replica's own row is judged by."""
FLEET_RULES: tuple[Rule[FleetView], ...] = tuple(d.rule for d in fleet.FINDINGS)
DEFINITIONS: tuple[Definition[Any], ...] = (
    *(d for m in ENGINE_FAMILIES for d in m.FINDINGS),
    *fleet.FINDINGS,
)
"""Every finding llmtop has, in the order of its rules."""
LEVEL_FINDINGS = frozenset(d.rule.id for d in DEFINITIONS if d.compares_levels)
"""The findings that compare a figure with its own earlier level (`Definition.compares_levels`)."""


def _guide() -> tuple[GuideRow, ...]:
    """One row per finding with words of its own, joined by those that share them."""
    sharing: dict[str, list[str]] = {}
    for d in DEFINITIONS:
        if isinstance(d.guide, str):
            sharing.setdefault(d.guide, []).append(d.rule.id)
    return tuple(
        GuideRow(
            (d.rule.id, *sharing.get(d.rule.id, ())),
            d.guide.bottleneck or d.rule.bottleneck,
            d.guide.fires_when,
            d.guide.action,
        )
        for d in DEFINITIONS
        if isinstance(d.guide, Guide)
    )


GUIDE = _guide()
"""What each finding means to a person (scripts/docs_tables.py, the `?` screen)."""
NOT_EXPRESSED = {d.rule.id: d.alert for d in DEFINITIONS if isinstance(d.alert, str)}
"""Findings with no alert, and why (every other finding has one)."""


def alerts(spec: AlertSpec) -> tuple[tuple[AlertRule, ...], dict[str, str]]:
    """The alerting rules for `spec`, and the findings left out with the reason."""
    made: list[AlertRule] = []
    left: dict[str, str] = {}
    for d in DEFINITIONS:
        rule = d.alert_rule(spec)
        if isinstance(rule, str):
            left[d.rule.id] = rule
        else:
            made.append(rule)
    return tuple(made), left


class HealthState:
    """Evaluates the engine rules with hysteresis; one per pipeline."""

    def __init__(self, settings: HealthSettings, rules: Sequence[Rule[Context]] = RULES) -> None:
        self.settings = settings
        self.rules = tuple(rules)
        self._held = Hysteresis(self.rules)

    def evaluate(self, ctx: Context) -> tuple[Finding, ...]:
        """The findings active at `ctx.time`, most severe first."""
        s = self.settings
        return self._held.evaluate(ctx, ctx.time, s.fire_after_s, s.clear_after_s)


class FleetHealth:
    """The fleet rules with the same hysteresis as `HealthState`."""

    def __init__(self, rules: FleetRules) -> None:
        self.rules = rules
        self._held = Hysteresis(FLEET_RULES)

    def evaluate(self, view: FleetView) -> tuple[Finding, ...]:
        """The fleet findings active at `view.time`, critical first."""
        r = self.rules
        return self._held.evaluate(view, view.time, r.fire_after_s, r.clear_after_s)
