"""What one poll knows: frozen dataclasses shared by the TUI, snapshot, recordings and reports.

None always means unknown (not scraped, not exported, not enough data yet), never zero: a panel
shows it as n/a and the health rules never read it as healthy. Units are in the field names.
New fields are added with a default, so recordings and tests made before them still load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

Severity = Literal["info", "warning", "critical"]
"""critical / warning: users miss the SLO now or are about to (a trend the finding states);
info: a heads-up (a full cache, a queue, a slowdown) while the SLO holds, with its headroom."""
Bottleneck = Literal["kv", "queue", "prefill", "decode", "gateway", "gpu", "target"]
Status = Literal["ok", "degraded", "critical", "unknown"]


@dataclass(frozen=True)
class LoraAdapters:
    """vLLM's `lora_requests_info` at one poll: the adapter slots and who holds or waits."""

    max_loras: int | None
    """Adapter slots per batch (`--max-loras`); None when the label was not a number."""
    running: tuple[str, ...]
    """Adapters of the requests running now."""
    waiting: tuple[str, ...]
    """Adapters that requests wait for (no slot free for them)."""


@dataclass(frozen=True)
class EngineStats:
    """One engine (one /metrics URL; data-parallel engines inside it are already summed)."""

    url: str
    up: bool
    error: str | None = None
    """Why the engine is down or its data unusable, in the user's words."""
    model: str | None = None
    version: str | None = None
    engine: str | None = "vllm"
    """The engine's dialect (`core.dialects`: vllm, sglang, llamacpp, ...); None: none found."""
    engine_note: str | None = None
    """What is odd about its exposition (two engines' families, a forced dialect it lacks)."""
    running: float | None = None
    waiting: float | None = None
    waiting_capacity: float | None = None
    """Waiting for KV capacity (vLLM >= 0.20, `num_requests_waiting_by_reason{reason=capacity}`)."""
    kv_cache_usage_frac: float | None = None
    kv_capacity_tokens: int | None = None
    kv_block_size: int | None = None
    prompt_tok_per_s: float | None = None
    decode_tok_per_s: float | None = None
    decode_tok_per_s_per_seq: float | None = None
    preemptions_per_s: float | None = None
    finished_per_s: dict[str, float] = field(default_factory=dict)
    """Finished requests per second by finished_reason (stop, length, abort, error, ...)."""
    admission_rejections_per_s: float | None = None
    admission_rejections_by_reason_per_s: dict[str, float] = field(default_factory=dict)
    """vLLM's own 503s per second by reason (max_num_queued_reqs, max_num_queued_tokens)."""
    prefix_cache_hit_frac: float | None = None
    mean_prompt_tokens: float | None = None
    mean_generation_tokens: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    itl_p99_s: float | None = None
    e2e_p95_s: float | None = None
    queue_time_p50_s: float | None = None
    queue_time_p95_s: float | None = None
    stats_disabled: bool = False
    """The target answers but exports no family llmtop reads (vLLM's --disable-log-stats, an
    engine whose metrics are off, or one llmtop does not know)."""
    ttft_mean_s: float | None = None
    """Mean time to first token over the window (Δsum/Δcount)."""
    queue_time_mean_s: float | None = None
    """Mean time in vLLM's waiting queue over the window."""
    prefill_time_mean_s: float | None = None
    """Mean prefill time (scheduled -> first token) over the window."""
    waiting_deferred: float | None = None
    """Waiting for a transient reason, not capacity: LoRA budget, KV transfer, blocked
    (vLLM >= 0.20, `num_requests_waiting_by_reason{reason=deferred}`)."""
    prompt_cache_hit_frac: float | None = None
    """Share of prompt tokens served from the local prefix cache over the window
    (vLLM >= 0.16, `prompt_tokens_by_source`): the prefill the cache saved."""
    prompt_computed_tok_per_s: float | None = None
    """Prompt tokens actually prefilled per second (`source=local_compute`)."""
    prefix_cache_queried_tok_per_s: float | None = None
    """Prompt tokens looked up in the prefix cache per second (None: not exported)."""
    decode_tok_per_s_now: float | None = None
    """Decode tok/s over the last poll interval (the stall detector's, not the window's)."""
    spec_acceptance_frac: float | None = None
    """Accepted / proposed draft tokens over the window (None: no speculative decoding)."""
    spec_mean_accepted_len: float | None = None
    """Tokens each speculative step yields over the window: 1 + accepted / drafts."""
    spec_acceptance_by_pos: tuple[float, ...] = ()
    """Acceptance per draft position (accepted at position i / drafts) over the window."""
    spec_drafts_per_s: float | None = None
    lora: LoraAdapters | None = None
    """LoRA adapter slots (None: LoRA is off, `lora_requests_info` not exported)."""
    kv_transfer_bytes_per_s: float | None = None
    """KV bytes moved per second by the KV connector (NIXL transfers, offload loads + stores)."""
    kv_transfer_failures_per_s: float | None = None
    """Failed KV transfers per second (NIXL failed transfers and notifications, expired
    requests, offload allocation failures); None when no connector family is exported."""
    kv_transfer_time_mean_s: float | None = None
    """Mean NIXL transfer time over the window."""
    sleep_state: str | None = None
    """awake, weights_offloaded (sleep level 1), discard_all (level 2); None: not exported."""
    longest_seq_tokens: float | None = None
    """The longest sequence (prompt + generation tokens) the engine has served, where it says
    (llama.cpp's n_tokens_max): a bound on a request's length where nothing counts requests."""
    healthy: bool | None = None
    """`engine_healthy` where exported; None: not exported or not a number."""
    corrupted_per_s: float | None = None
    """Requests with NaNs in their logits per second (`VLLM_COMPUTE_NANS_IN_LOGITS=1`)."""
    restarted_at: float | None = None
    """When this engine's counters last went back (it restarted), the snapshot clock."""
    unread: tuple[str, ...] = ()
    """What could not be read from the scrape, in words (a NaN gauge, an unknown label)."""

    @cached_property
    def kv_tokens_per_running(self) -> float | None:
        """KV tokens each running sequence holds (usage x capacity / running); None when
        unknown or not finite. Worked out once a row: `kv_size` reads it for every row of its
        minute's look-back, for every full replica at every poll."""
        cap, usage, running = self.kv_capacity_tokens, self.kv_cache_usage_frac, self.running
        if cap is None or usage is None or not running or running <= 0:
            return None
        tokens = usage * cap / running
        return tokens if math.isfinite(tokens) else None


@dataclass(frozen=True)
class GatewayStats:
    """The llmtop gateway's limits and live state, from /admin/stats and /admin/limits."""

    url: str
    up: bool
    error: str | None = None
    in_flight: int | None = None
    queued: int | None = None
    queued_by_priority: dict[str, int] = field(default_factory=dict)
    max_concurrency: int | None = None
    max_queue: int | None = None
    queue_timeout_s: float | None = None
    rate_limit_rpm: float | None = None
    max_inflight_prompt_tokens: int | None = None
    max_inflight_kv_blocks: int | None = None
    max_unprefilled_prompt_tokens: int | None = None
    ttft_slo_s: float | None = None
    queue_policy: str | None = None
    mode: str | None = None
    """auto: the autopilot moves the KV budget; manual: people do."""
    autopilot_reason: str | None = None
    """The autopilot's last move and why ("KV budget 2,907 -> 2,592 blocks: preempting 2.0/s")."""
    binding: str | None = None
    """The limit holding the head of the gateway's queue now (None: nobody waits)."""
    binding_reason: str | None = None
    """...in words, with the arithmetic ("prefill backlog 9,100 tokens, budget 2,400: ...")."""
    unprefilled_prompt_tokens: int | None = None
    """Prompt tokens admitted with no first token yet (the prefill budget's count)."""
    paused: bool | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    """Cumulative outcome counters: completed, rejected:<reason>, timed_out, cancelled, ..."""
    rejected_per_s: dict[str, float] = field(default_factory=dict)
    """429s per second by reason (queue_full, queue_timeout, rate_limited, ...)."""
    queue_wait_p50_s: float | None = None
    queue_wait_p95_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    upstream_healthy: bool | None = None
    upstream_errors_per_s: dict[str, float] = field(default_factory=dict)
    """Upstream failures per second by reason: engine_queue_full / engine_token_backlog are
    vLLM's own 503 refusals (--max-num-queued-reqs/-tokens), apart from engine faults."""
    oldest_queued_s: float | None = None
    """Age of the oldest request waiting in the gateway at this poll (None: none, or unknown)."""
    oldest_unanswered_s: float | None = None
    """Age since admission of the oldest request at the engine still without a first byte: a
    stuck request shows here at once, in the TTFT histograms only once it is answered."""
    queued_ages_s: tuple[float, ...] = ()
    """Seconds each request waiting in the gateway has waited, in queue order (the gateway's
    first 1,000; empty: none waits, or a gateway too old to say)."""
    replicas: tuple[ReplicaStats, ...] = ()
    """The upstream replicas behind this gateway (one when it fronts a single engine)."""
    shared_status: str | None = None
    """With limits shared through Redis: ok, or fallback (Redis away, local share); else None."""
    shared_live_gateways: int | None = None
    shared_draining_gateways: int | None = None
    """Of those, the others draining after a SIGTERM (None: not known, or no Redis)."""
    shared_url: str | None = None
    """The Redis the limits are shared through (no password)."""
    shared_error: str | None = None
    """Why Redis is unreachable, in the gateway's words (None: it answers)."""
    global_in_flight: int | None = None
    """Slots held by all gateways sharing the limits, at this gateway's last sync."""
    slo_ttft_s: float | None = None
    """The TTFT SLO the gateway read ([slo] ttft_s; None: a gateway too old to say).
    `ttft_slo_s` is admission's budget: this SLO unless overridden live."""
    queue_budget_s: float | None = None
    """Seconds a request may wait in the gateway's queue: admission's TTFT budget less the
    engine's recent TTFT (None: no deadline queue, fifo or off)."""
    engine_ttft_s: float | None = None
    """The engine's recent TTFT the gateway keeps as the margin of each budget."""
    tenant_ttft_slo_s: tuple[tuple[str, float], ...] = ()
    """Per-tenant TTFT budgets: overrides of the SLO for admission only."""


@dataclass(frozen=True)
class ReplicaStats:
    """One upstream replica as the gateway's balancer sees it."""

    url: str
    in_flight: int | None
    ok: bool
    """Takes traffic (False: ejected, or awaiting a /health probe)."""
    share: float | None
    state: str | None = None
    """ok, ejected or probing (None: a gateway too old to say)."""
    last_error: str | None = None
    """Why it last left rotation (or last failed)."""
    out_for_s: float | None = None
    """Seconds since it left rotation, while it is out (None: in rotation, or unknown)."""
    back_s_ago: float | None = None
    """Seconds since it came back into rotation (None: never out, out now, or unknown)."""
    request_tok_per_s: float | None = None
    """Its tokens per request-second at the gateway over the last 1 s, streams and whole
    answers (None: too few to say, or unknown)."""
    request_seconds: float = 0.0
    """The request-seconds that rate is of."""


@dataclass(frozen=True)
class GpuStats:
    """One GPU, from NVML, dcgm-exporter or the simulator's telemetry."""

    index: int
    name: str | None = None
    source: str = "nvml"
    util_frac: float | None = None
    mem_bw_util_frac: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    processes: tuple[str, ...] = ()
    xid_last: int | None = None
    """The last XID error code (dcgm `DCGM_FI_DEV_XID_ERRORS`; 0: none since boot)."""
    ecc_uncorrectable: float | None = None
    """Uncorrectable memory errors: volatile DBE, else uncorrectable remapped rows."""
    ecc_correctable: float | None = None
    """Correctable memory errors: volatile SBE, else correctable remapped rows."""


@dataclass(frozen=True)
class Finding:
    """A named problem: which resource binds, the measured evidence, and what to do."""

    id: str
    severity: Severity
    bottleneck: Bottleneck
    summary: str
    action: str
    since: float | None = None
    """Time (seconds, the snapshot clock) the finding fired."""


@dataclass(frozen=True)
class Snapshot:
    """Everything one poll knows, after derivation and the health rules."""

    time: float
    engines: tuple[EngineStats, ...] = ()
    gateway: GatewayStats | None = None
    gpus: tuple[GpuStats, ...] = ()
    gpu_error: str | None = None
    """Why no GPU is shown ("no NVIDIA GPU visible"), when none is."""
    findings: tuple[Finding, ...] = ()
    status: Status = "unknown"


# --- a fleet's poll: every replica with its own figures and findings (core.pipeline.fleet) ---


@dataclass(frozen=True)
class Replica:
    """One row of the fleet: a server, or one data-parallel engine inside it (a sub-row)."""

    key: str
    """Stable id: the server URL (or Prometheus instance), "<key>#engine=N" for a sub-row."""
    name: str
    """What the table shows: the targets-file name, host:port, or "<name>#N" for a sub-row."""
    stats: EngineStats
    findings: tuple[Finding, ...] = ()
    """This replica's own findings (the engine rules over it alone), critical first."""
    status: Status = "unknown"
    engine: str | None = None
    """The data-parallel engine index of a sub-row."""
    parent: str | None = None
    """The key of the server a sub-row belongs to."""
    pod: PodRef | None = None
    """The Kubernetes pod it runs in, when discovery found it (--k8s-selector)."""


@dataclass(frozen=True)
class PodRef:
    """Where a replica runs on Kubernetes: its pod, node and restarts, as last watched."""

    namespace: str
    name: str
    node: str | None = None
    restarts: int = 0
    """Its containers' restartCount, summed."""
    last_reason: str | None = None
    """The last container termination's reason (OOMKilled, Error, ...)."""


@dataclass(frozen=True)
class FleetTotals:
    """The servers added up (sub-rows are inside their server's figures); None = unknown."""

    replicas: int
    up: int
    running: float | None
    waiting: float | None
    prompt_tok_per_s: float | None
    decode_tok_per_s: float | None
    kv_cache_usage_frac_mean: float | None
    kv_cache_usage_frac_max: float | None
    ttft_p95_s_max: float | None
    itl_p95_s_max: float | None


@dataclass(frozen=True)
class FleetEvent:
    """Something that happened to one replica between two polls."""

    time: float
    kind: Literal[
        "restart", "pod-added", "pod-deleted", "pod-restarted", "api-away", "api-back",
        "pool-changed",
    ]  # fmt: skip
    """restart: a counter went back; pod-*, api-* and pool-changed: Kubernetes discovery
    (core.pipeline.pods)."""
    replica: str
    summary: str


@dataclass(frozen=True)
class Fleet:
    """Every replica with its own figures and findings, worst first, and the fleet's."""

    time: float
    replicas: tuple[Replica, ...]
    """Servers worst first, each followed by its data-parallel engines (worst first)."""
    totals: FleetTotals
    findings: tuple[Finding, ...]
    """Fleet findings (replica-down, replica-outlier, load-imbalance)."""
    events: tuple[FleetEvent, ...]
    """Restarts seen over the last ten minutes, oldest first."""
    status: Status


@dataclass(frozen=True)
class FleetSnapshot(Snapshot):
    """The fleet's Snapshot carrying its `Fleet`, so every reader of Snapshots (the TUI's
    history, replay, `snapshot`'s window) has the replica rows of the same poll."""

    fleet: Fleet | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DerivedReplica:
    """A replica whose figures were computed elsewhere (PromQL) rather than from samples."""

    key: str
    name: str
    stats: EngineStats
    restarts: float | None = None
    """Counter resets over the window (PromQL `resets()`); a rise is a restart event."""
    engine: str | None = None
    parent: str | None = None
