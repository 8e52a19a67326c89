"""A finding, defined once: the `Rule` the hysteresis judges (id, class, check), its static
advice, the thresholds it reads, its row of the guide and its Prometheus alert (or why PromQL
cannot say it). The catalog derives every registry from these. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, replace
from typing import Generic, NamedTuple

from llmtop.core.alerts.alert import Alert, alert_name
from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.dialects.catalog import lacking
from llmtop.core.health.rulebase import Context, Rule, Verdict, X


@dataclass(frozen=True)
class Guide:
    """A finding's words for people: when it fires and what to do (README's findings table
    and the `?` screen)."""

    fires_when: str
    action: str
    bottleneck: str = ""
    """"": the finding's; a finding whose check names several says so."""


class GuideRow(NamedTuple):
    """One row of the guide: findings that share their words, the bottleneck, when, what to do."""

    ids: tuple[str, ...]
    bottleneck: str
    fires_when: str
    action: str


AlertOf = Callable[[AlertSpec], Alert | str]
"""A finding's alert for a spec, or why that spec leaves it out (a selector it needs)."""


@dataclass(frozen=True)
class Definition(Generic[X]):
    """One finding: the `Rule` the hysteresis judges, and everything said about it elsewhere."""

    rule: Rule[X]
    """Its id, default class, check, and whether it fires at once (`immediate`)."""
    _: KW_ONLY
    advice: str = ""
    """Its static action: the check's where a Verdict brings none, and its alert's."""
    guide: Guide | str
    """Its row of the guide, or the id of the finding whose row it shares."""
    alert: AlertOf | str
    """Its alert, made from the spec's thresholds, or why PromQL cannot say it."""
    reads: tuple[str, ...] = ()
    """The thresholds it reads (fields of HealthSettings, `slo.` for the SLO's, or of
    FleetRules): its alert moves with each and with no other (tests/unit/test_alerts_rules.py)."""
    needs: tuple[str, ...] = ()
    """The figures its check needs (`core.dialects.dialect.FIGURES`): an engine whose dialect
    lacks one is not judged by it, and `snapshot --json` lists it as unavailable there."""
    compares_levels: bool = False
    """It compares a figure with its own earlier level (the TUI's window against the rows of
    the look-back): a snapshot's window takes it from the TUI's pipeline over its polls."""

    def __post_init__(self) -> None:
        rule = replace(self.rule, advice=self.advice)
        if self.needs:
            rule = replace(rule, check=_judged(rule.check, self.needs))  # type: ignore[arg-type]
        object.__setattr__(self, "rule", rule)

    def alert_rule(self, spec: AlertSpec) -> AlertRule | str:
        """Its alerting rule for `spec`, or why there is none."""
        made = self.alert if isinstance(self.alert, str) else self.alert(spec)
        if isinstance(made, str):
            return made
        r = self.rule
        return AlertRule(r.id, r.severity, r.bottleneck, r.immediate, made, r.advice)


def _judged(
    check: Callable[[Context], Verdict | None], needs: tuple[str, ...]
) -> Callable[[Context], Verdict | None]:
    """`check` over the engines whose dialect has every figure it needs; the Context as it is
    when all do (the usual case: one comparison an engine, no copy)."""

    def judged(ctx: Context) -> Verdict | None:
        if all(lacking(e.engine, needs) is None for e in ctx.engines):
            return check(ctx)
        able = tuple(e for e in ctx.engines if lacking(e.engine, needs) is None)
        return check(replace(ctx, engines=able)) if able else None

    return judged


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule of the file: a finding's `Alert` with its definition's id, class,
    hold and advice."""

    finding: str
    severity: str
    bottleneck: str
    immediate: bool
    alert: Alert
    advice: str

    @property
    def name(self) -> str:
        return alert_name(self.finding)

    @property
    def action(self) -> str:
        return self.alert.action or self.advice

    def labels(self) -> dict[str, str]:
        out = {"severity": self.alert.severity or self.severity}
        bottleneck = self.bottleneck if self.alert.bottleneck is None else self.alert.bottleneck
        if bottleneck:
            out["bottleneck"] = bottleneck
        out["finding"] = self.finding
        return out
