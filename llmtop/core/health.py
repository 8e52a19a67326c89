"""Health rules as data: each names the binding resource, the measured numbers and the fix.

A rule is a pure check over a `Context` (this poll's stats, recent snapshots, settings) that
returns a `Verdict` when its condition holds. `HealthState` adds hysteresis: a condition must
hold `fire_after_s` before its finding fires (immediate rules, such as target-down, fire at
once) and must stay false `clear_after_s` before the finding clears, so a finding does not
flap on one noisy window. A rule whose inputs are unknown (None) does not hold; the pipeline
separately reports status "unknown" when the core inputs are missing, so unknown never reads
as healthy. Actions name the right fix: for backlog and KV exhaustion, cap concurrency at the
gateway (never raise --max-num-seqs). The checks live in `rules_engine` (engines) and
`rules_edge` (gateway, GPUs); their vocabulary in `rulebase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmtop.core.rulebase import Context, Rule, Verdict
from llmtop.core.rules_edge import (
    gateway_down,
    gateway_paused,
    gateway_saturated,
    gpu_memory_full,
    gpu_throttled,
)
from llmtop.core.rules_engine import (
    batching_cliff,
    decode_bound,
    degraded_200,
    kv_exhausted,
    prefill_bound,
    stale_data,
    stats_disabled,
    target_down,
    vllm_admission,
)
from llmtop.core.snapshot import Finding
from llmtop.core.thresholds import HealthSettings

__all__ = ["RULES", "Context", "HealthState", "Rule", "Verdict"]


RULES: tuple[Rule, ...] = (
    Rule("target-down", "critical", "target", target_down, immediate=True),
    Rule("stats-disabled", "warning", "target", stats_disabled, immediate=True),
    Rule("stale-data", "critical", "target", stale_data),
    Rule("kv-exhausted", "critical", "kv", kv_exhausted),
    Rule("degraded-200", "warning", "queue", degraded_200),
    Rule("batching-cliff", "warning", "queue", batching_cliff),
    Rule("decode-bound", "warning", "decode", decode_bound),
    Rule("prefill-bound", "warning", "prefill", prefill_bound),
    Rule("vllm-admission-rejecting", "warning", "queue", vllm_admission),
    Rule("gateway-saturated", "warning", "gateway", gateway_saturated),
    Rule("gateway-paused", "warning", "gateway", gateway_paused, immediate=True),
    Rule("gateway-down", "warning", "gateway", gateway_down, immediate=True),
    Rule("gpu-throttled", "warning", "gpu", gpu_throttled),
    Rule("gpu-memory-full", "warning", "gpu", gpu_memory_full),
)


@dataclass
class _RuleState:
    pending_since: float | None = None
    fired_since: float | None = None
    false_since: float | None = None
    verdict: Verdict | None = None


class HealthState:
    """Evaluates the rules with hysteresis; one per pipeline."""

    def __init__(self, settings: HealthSettings, rules: Sequence[Rule] = RULES) -> None:
        self.settings = settings
        self.rules = tuple(rules)
        self._state: dict[str, _RuleState] = {r.id: _RuleState() for r in self.rules}

    def evaluate(self, ctx: Context) -> tuple[Finding, ...]:
        """The findings active at `ctx.time`, most severe first."""
        s = self.settings
        t = ctx.time
        out: list[Finding] = []
        for rule in self.rules:
            st = self._state[rule.id]
            verdict = rule.check(ctx)
            if verdict is not None:
                st.verdict, st.false_since = verdict, None
                if st.fired_since is None:
                    if st.pending_since is None:
                        st.pending_since = t
                    if rule.immediate or t - st.pending_since >= s.fire_after_s:
                        st.fired_since = t
            else:
                st.pending_since = None
                if st.fired_since is not None:
                    if st.false_since is None:
                        st.false_since = t
                    if rule.immediate or t - st.false_since >= s.clear_after_s:
                        st.fired_since = st.false_since = None
            if st.fired_since is not None and st.verdict is not None:
                v = st.verdict
                out.append(
                    Finding(
                        id=rule.id,
                        severity=v.severity or rule.severity,
                        bottleneck=v.bottleneck or rule.bottleneck,
                        summary=v.summary,
                        action=v.action,
                        since=st.fired_since,
                    )
                )
        out.sort(key=lambda f: 0 if f.severity == "critical" else 1)
        return tuple(out)
