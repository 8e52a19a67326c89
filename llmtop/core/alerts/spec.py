"""What a rules file is made from: the thresholds the TUI judges by, the selectors that find
vLLM's and the gateway's series, the label naming a replica, and Prometheus' interval, which
sets how long the windows and holds can be. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmtop.core.health.thresholds import FleetRules, HealthSettings
from llmtop.errors import UsageError

if TYPE_CHECKING:
    from llmtop.core.promql.promql import Queries

G = "llmtop_gateway_"
"""The prefix of the gateway's own series on its /metrics."""

DEFAULT_INTERVAL_S = 15.0
"""Prometheus' scrape and evaluation interval assumed when none is given (its example config's;
llmtop's own poll is 1 s)."""
RATE_SCRAPES = 4
"""A rate's window spans at least this many scrapes (Prometheus' advice: a window of one or two
scrapes misses or doubles a counter's step)."""
HISTORY_S = 600.0
"""How far back the look-backs reach (the pipeline keeps ten minutes of snapshots)."""
SIZE_LOOKBACK_S = 60.0
"""`kv_size`'s look-back for the most KV a running sequence held (core.health.kvsize)."""
GATEWAY_WINDOW_S = 60.0
"""The gateway's own window of its queue-wait quantiles (/admin/stats `window_s`)."""


def matchers(selector: str | None, flag: str) -> str:
    """The matchers inside a selector's braces, or a one-line error naming the flag."""
    from llmtop.core.promql.promql import selector_matchers  # `llmtop rules` only

    try:
        return selector_matchers(selector)
    except UsageError:
        raise UsageError(
            f"{flag} {selector!r} is not a PromQL selector: expected "
            '{label="value", ...} (or !=, =~, !~)'
        ) from None


def duration(seconds: float) -> str:
    """Seconds as a Prometheus duration: whole seconds as `10s`, else milliseconds."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def gateway_over(spec: AlertSpec, how: str, series: str, seconds: float) -> str:
    """`how`_over_time of one of the gateway's series over `seconds` (at least one interval)."""
    look = duration(spec.at_least_interval(seconds))
    return f"{how}_over_time({spec.gateway(G + series)}[{look}])"


def number(x: float) -> str:
    """A threshold as a PromQL number, every digit kept."""
    return repr(float(x))


@dataclass(frozen=True)
class AlertSpec:
    """The inputs of a rules file."""

    health: HealthSettings = field(default_factory=HealthSettings)
    vllm_matchers: str = ""
    """Matchers of vLLM's series (inside the braces): the scrape job, namespace, ..."""
    gateway_matchers: str = ""
    replica_label: str = "instance"
    interval_s: float = DEFAULT_INTERVAL_S
    dialect: str = "vllm"
    """The engine whose series the rules read (`core.dialects`): its own names for vLLM's."""
    beside: tuple[str, ...] = ()
    """The other engines of the same file: what the gateway's figures add up besides this
    engine's (`figures._gateway_side`)."""
    gateway_part: bool = True
    """Whether these rules carry the gateway's own (its figures, its alerts): one engine's
    group of a file does, the others' do not (a rule in two groups would write twice)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.interval_s) and 0.1 <= self.interval_s <= 3600):
            raise UsageError(
                f"--interval-s must be between 0.1 and 3600 seconds, got {self.interval_s:g}"
            )
        from llmtop.core.dialects.engines import BY_KIND

        for kind in (self.dialect, *self.beside):
            if kind not in BY_KIND:
                raise UsageError(f"--dialect {kind!r}: one of {', '.join(BY_KIND)}")
        _ = self.queries  # checks the replica label, naming the flag

    @property
    def fleet_rules(self) -> FleetRules:
        """The fleet rules' thresholds, as the fleet pipeline makes them."""
        return FleetRules.of(self.health)

    @property
    def r(self) -> str:
        """The replica label."""
        return self.replica_label

    @property
    def window_s(self) -> float:
        """The rates' and quantiles' window: llmtop's, or more scrapes when they are sparse."""
        return max(self.health.window_s, RATE_SCRAPES * self.interval_s)

    def at_least_interval(self, seconds: float) -> float:
        """A look-back of `seconds`, but never shorter than one evaluation."""
        return max(seconds, self.interval_s)

    @property
    def queries(self) -> Queries:
        """The fleet source's queries over the same series (core.promql): the figures' PromQL
        (imported here: the findings, which the TUI loads at start, build no alert there)."""
        from llmtop.core.promql.promql import Queries

        return Queries(self.vllm_matchers, self.window_s, self.replica_label, self.dialect)

    @property
    def p(self) -> str:
        """The recorded figures' prefix for this engine (`figures.P` for vLLM)."""
        return f"llmtop:{self.dialect}_"

    def vllm(self, *names: str, extra: str = "") -> str:
        """A selector of vLLM's series (the engine's own, `Queries.selectors`); several names
        (newest first) joined with `or`."""
        from llmtop.core.promql.promql import alternatives

        q = self.queries
        parts = alternatives(q.selectors(n, extra) for n in names)
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def gateway(self, name: str, extra: str = "") -> str:
        """A selector of the gateway's series."""
        inside = ",".join(x for x in (self.gateway_matchers, extra) if x)
        return f"{name}{{{inside}}}" if inside else name
