"""The findings' thresholds as plain values: frozen dataclasses core reads and never loads.

The config loader (llmtop.settings) fills it from flags, LLMTOP_* variables and the [health]
table of the config file; core only receives the values, so core imports no loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtop.core.base.slo import SloSettings


@dataclass(frozen=True)
class HealthSettings:
    """Thresholds of the health rules, and the SLO they judge latency by."""

    slo: SloSettings = field(default_factory=SloSettings)
    """What the users of the endpoint were promised (the `[slo]` section, core/base/slo.py):
    a TTFT or ITL p95 above it is degraded."""
    queue_wait_slo_s: float = 5.0
    """Gateway queue wait P95 above this is a saturated gateway."""
    kv_high_frac: float = 0.9
    """KV-cache usage at or above this, with preemptions or waiting, is exhaustion."""
    kv_target_frac: float = 0.9
    """Share of the KV cache a suggested cap may fill (`kv_size`): the rest is headroom for
    what a mean size leaves out (requests longer than it, answers still growing, vLLM's 1%
    watermark of free blocks; docs/snapshot.md shows a cap at the exact quotient never
    clearing). Keep it at or below `kv_high_frac`, or the cap a finding suggests is one it
    calls exhausted."""
    error_rate_max: float = 0.01
    """A share of failed requests below this counts as "no errors" for degraded-200."""
    fire_after_s: float = 3.0
    """A rule must hold this long before its finding fires."""
    clear_after_s: float = 10.0
    """A fired rule must stay false this long before its finding clears."""
    window_s: float = 10.0
    """Window of the histogram quantiles and rates."""
    stale_after_s: float = 15.0
    """Running requests with no token progress for this long is a hung engine or stale data."""
    scheduler_stuck_after_s: float = 10.0
    """Requests waiting, none running, KV free and no token generated for this long is a
    scheduler that admits nothing (vLLM issue #53130): a healthy one admits within a step."""
    cliff_waiting_growth: float = 4.0
    """Waiting must grow by at least this many requests over the window for a batching cliff."""
    cliff_flat_frac: float = 0.1
    """Decode throughput within this share of its earlier value counts as flat."""
    decode_collapse_frac: float = 0.5
    """Per-sequence decode rate under this share of its best (at half the running): decode-bound."""
    prefill_dominant_frac: float = 0.5
    """Prefill time above this share of TTFT (with TTFT over its SLO) is prefill-bound."""
    gateway_queue_near_frac: float = 0.8
    """A gateway queue at or above this share of max_queue is near full."""
    gpu_mem_high_frac: float = 0.98
    """GPU memory used at or above this share of total is nearly full (vLLM preallocates ~0.9)."""
    critical_slo_factor: float = 4.0
    """A latency this many times its SLO makes degraded-200 critical."""
    trend_horizon_s: float = 30.0
    """A latency p95 whose rise over the window, carried on, crosses its SLO within this many
    seconds is "about to miss it": a finding inside the SLO is then a warning, not info."""
    prefix_drop_from_frac: float = 0.3
    """prefix-cache-collapse: the hit rate it fell from (over the look-back) was at least this."""
    prefix_drop_to_share: float = 0.35
    """...and now is under this share of it (88 % -> 3 % is 0.03)."""
    prefix_lookback_s: float = 60.0
    """How far back prefix-cache-collapse and decode-stall look for the level they compare to."""
    spec_acceptance_low_frac: float = 0.25
    """Draft tokens accepted under this share: speculation costs more than it yields (a step
    proposes k tokens and keeps about 1 + k x acceptance)."""
    spec_drop_share: float = 0.5
    """...or acceptance under this share of its level over the look-back."""
    decode_stall_frac: float = 0.25
    """decode-stall: decode tok/s over the last poll under this share of its running median
    while a prefill runs (vllm-top's detector)."""
    restart_note_s: float = 60.0
    """engine-restarted stays this long after the counters went back."""
    gpu_idle_frac: float = 0.1
    """tp-gpu-idle: a GPU under this utilisation ..."""
    gpu_busy_frac: float = 0.5
    """... while the engine's other GPUs are all at or above this."""
    replica_recent_out_s: float = 10.0
    """replica-out-of-rotation holds while a replica is out of the gateway's rotation and this
    long after it came back (one that is probed back and fails again is out at every turn)."""
    replica_slow_share: float = 0.33
    """replica-slow: a replica whose requests get tokens under this share of its peers'..."""
    replica_slow_min_request_s: float = 0.5
    """...each rate of at least this many request-seconds in the gateway's 1 s window."""
    peer_lookback_s: float = 60.0
    """gateway-peer-lost: fewer gateways share the limits than the most seen this long back..."""
    peer_settle_s: float = 10.0
    """...and Redis and the watched gateway have answered this long (after either comes back,
    the gateways register again over a few syncs, and an old lease runs out its TTL)."""


@dataclass(frozen=True)
class FleetRules:
    """Thresholds of the fleet's findings; a replica's own findings keep `HealthSettings`."""

    outlier_min_replicas: int = 3
    """Replicas needed to call one an outlier (it is compared with the median of the others)."""
    outlier_factor: float = 3.0
    """An outlier's waiting or TTFT p95 is at least this many times the others' median..."""
    outlier_waiting_min: float = 8.0
    """...and waits at least this many requests more than that median."""
    outlier_kv_gap: float = 0.3
    """An outlier's KV usage is full (kv_high_frac) and this far above the others' median."""
    imbalance_factor: float = 2.0
    """The busiest replica carries at least this many times the mean in-flight requests..."""
    imbalance_min_load: float = 8.0
    """...and this many more than the idlest."""
    kv_high_frac: float = 0.9
    ttft_slo_s: float = SloSettings().ttft_s
    """The TTFT SLO (HealthSettings.slo, through `of`)."""
    fire_after_s: float = 3.0
    clear_after_s: float = 10.0

    @classmethod
    def of(cls, health: HealthSettings) -> FleetRules:
        """The defaults with health's KV mark, TTFT SLO and holds: the fleet pipeline's and
        the rules file's."""
        return cls(
            kv_high_frac=health.kv_high_frac,
            ttft_slo_s=health.slo.ttft_s,
            fire_after_s=health.fire_after_s,
            clear_after_s=health.clear_after_s,
        )
