"""Health rules as data: each names the binding resource, the measured numbers and the fix.

A rule is a pure check over a `Context` returning a `Verdict` when it holds; `HealthState`
adds hysteresis (hold `fire_after_s` to fire, unless immediate; false `clear_after_s` to clear)
so a finding does not flap. Unknown inputs never hold. The checks live in rules_*.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmtop.core.base.snapshot import Finding
from llmtop.core.health.rulebase import Context, Hysteresis, Rule, Verdict
from llmtop.core.health.rules_edge import (
    gateway_down,
    gateway_paused,
    gateway_queue_over_slo,
    gateway_saturated,
    gpu_memory_full,
    gpu_throttled,
)
from llmtop.core.health.rules_engine import (
    batching_cliff,
    decode_bound,
    degraded_200,
    kv_exhausted,
    prefill_bound,
    scheduler_stuck,
    stale_data,
    stats_disabled,
    target_down,
    vllm_admission,
)
from llmtop.core.health.rules_field import (
    decode_stall,
    engine_asleep,
    engine_restarted,
    engine_unhealthy,
    kv_transfer_failing,
    lora_waiting,
    prefix_cache_collapse,
    requests_corrupted,
    spec_decode_low,
)
from llmtop.core.health.rules_gateway import (
    gateway_peer_draining,
    gateway_peer_lost,
    gateway_shared_limits_lost,
    replica_out_of_rotation,
    replica_slow,
)
from llmtop.core.health.rules_gpu import gpu_xid_error, tp_gpu_idle
from llmtop.core.health.thresholds import HealthSettings

__all__ = ["REPLICA_RULES", "RULES", "Context", "HealthState", "Rule", "Verdict"]


RULES: tuple[Rule[Context], ...] = (
    Rule("target-down", "critical", "target", target_down, immediate=True),
    Rule("stats-disabled", "warning", "target", stats_disabled, immediate=True),
    Rule("stale-data", "critical", "target", stale_data),
    Rule("scheduler-stuck", "critical", "target", scheduler_stuck),
    Rule("kv-exhausted", "critical", "kv", kv_exhausted),
    Rule("degraded-200", "warning", "queue", degraded_200),
    Rule("batching-cliff", "warning", "queue", batching_cliff),
    Rule("decode-bound", "warning", "decode", decode_bound),
    Rule("prefill-bound", "warning", "prefill", prefill_bound),
    Rule("vllm-admission-rejecting", "warning", "queue", vllm_admission),
    Rule("gateway-saturated", "warning", "gateway", gateway_saturated),
    Rule("gateway-queue-over-slo", "warning", "gateway", gateway_queue_over_slo),
    Rule("gateway-paused", "warning", "gateway", gateway_paused, immediate=True),
    Rule("gateway-down", "warning", "gateway", gateway_down, immediate=True),
    # what the gateway knows of its replicas and peers (rules_gateway): judged already there
    Rule("replica-out-of-rotation", "warning", "target", replica_out_of_rotation, immediate=True),
    Rule("replica-slow", "warning", "decode", replica_slow, fire_after_s=0.5),
    Rule(
        "gateway-shared-limits-lost",
        "warning",
        "gateway",
        gateway_shared_limits_lost,
        immediate=True,
    ),
    Rule("gateway-peer-lost", "warning", "gateway", gateway_peer_lost, immediate=True),
    Rule("gateway-peer-draining", "info", "gateway", gateway_peer_draining, immediate=True),
    Rule("gpu-throttled", "warning", "gpu", gpu_throttled),
    Rule("gpu-memory-full", "warning", "gpu", gpu_memory_full),
    # the field guide (rules_field, rules_gpu): severities by the SLO, see slo_policy
    Rule("engine-unhealthy", "critical", "target", engine_unhealthy, immediate=True),
    Rule("engine-asleep", "info", "target", engine_asleep),
    Rule("engine-restarted", "info", "target", engine_restarted, immediate=True),
    Rule("requests-corrupted", "warning", "target", requests_corrupted),
    Rule("prefix-cache-collapse", "warning", "prefill", prefix_cache_collapse),
    Rule("decode-stall", "warning", "prefill", decode_stall),
    Rule("spec-decode-low", "warning", "decode", spec_decode_low),
    Rule("lora-waiting", "warning", "queue", lora_waiting),
    Rule("kv-transfer-failing", "warning", "kv", kv_transfer_failing),
    Rule("gpu-xid-error", "critical", "gpu", gpu_xid_error, immediate=True),
    Rule("tp-gpu-idle", "info", "gpu", tp_gpu_idle),
)

_EDGE_CHECKS = frozenset(
    {
        gateway_saturated,
        gateway_queue_over_slo,
        gateway_paused,
        gateway_down,
        replica_out_of_rotation,
        replica_slow,
        gateway_shared_limits_lost,
        gateway_peer_lost,
        gateway_peer_draining,
        gpu_throttled,
        gpu_memory_full,
        gpu_xid_error,
        tp_gpu_idle,
    }
)
REPLICA_RULES: tuple[Rule[Context], ...] = tuple(
    r for r in RULES if r.check not in _EDGE_CHECKS and r.check is not engine_restarted
)
"""The rules a fleet replica's own Context can make hold: it carries no gateway and no GPUs,
and the gateway and GPU rules read nothing else (the fleet's edge pipeline judges those). A
replica's restart is the fleet's event (`Fleet.events`), not a finding of its row."""


class HealthState:
    """Evaluates the rules with hysteresis; one per pipeline."""

    def __init__(self, settings: HealthSettings, rules: Sequence[Rule[Context]] = RULES) -> None:
        self.settings = settings
        self.rules = tuple(rules)
        self._held = Hysteresis(self.rules)

    def evaluate(self, ctx: Context) -> tuple[Finding, ...]:
        """The findings active at `ctx.time`, most severe first."""
        s = self.settings
        return self._held.evaluate(ctx, ctx.time, s.fire_after_s, s.clear_after_s)
