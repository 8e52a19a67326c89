"""What each finding means to a person: when it fires and what to do, one row per finding
(or per group that shares its words). README's findings table is made from these rows
(scripts/docs_tables.py); tests/unit/test_docs.py holds their ids and bottlenecks to the rules."""

from __future__ import annotations

from typing import NamedTuple


class GuideRow(NamedTuple):
    """Findings and their words: the bottleneck, when they fire, what to do."""

    ids: tuple[str, ...]
    bottleneck: str
    fires_when: str
    action: str


GUIDE: tuple[GuideRow, ...] = (
    GuideRow(
        ("degraded-200",),
        "kv / queue / decode / prefill",
        "TTFT p95 > 2 s or ITL p95 > 100 ms while errors are ~0",
        "by the bottleneck named",
    ),
    GuideRow(
        ("kv-exhausted",),
        "kv",
        (
            "KV usage >= 90 % with preemptions or requests waiting for memory; critical "
            "over the SLO, warning about to be, info inside it"
        ),
        (
            "cap concurrency at ~N = 90 % of the KV tokens (`kv_target_frac`) / tokens per "
            "request: the larger of the mean prompt + output and what each running sequence"
            " held (usage x capacity / running, the most in the last minute)"
        ),
    ),
    GuideRow(
        ("batching-cliff",),
        "queue",
        "waiting grows while decode throughput stays flat",
        "cap at the running count; let the gateway queue",
    ),
    GuideRow(
        ("decode-bound",),
        "decode",
        "per-sequence decode rate collapsing as running grows, ITL over SLO",
        "cap at decode tok/s x ITL SLO",
    ),
    GuideRow(
        ("prefill-bound",),
        "prefill",
        "prefill time dominates TTFT",
        "cap in-flight prompt tokens",
    ),
    GuideRow(
        ("vllm-admission-rejecting",),
        "queue",
        "vLLM's own `--max-num-queued-reqs` answers 503s",
        "let the gateway queue instead, or raise the limit",
    ),
    GuideRow(
        ("gateway-saturated",),
        "gateway",
        "gateway queue near max, 429s, queue wait p95 over SLO",
        (
            "raise the cap if the engine has headroom, no higher than kv-exhausted's N; "
            "else add capacity"
        ),
    ),
    GuideRow(
        ("gateway-queue-over-slo",),
        "gateway",
        "a request has waited in the gateway's own queue past the TTFT SLO (before any 429)",
        (
            "raise the cap to what the KV cache holds when the engine has headroom (with "
            "the arithmetic); else add capacity or let the autopilot refuse early"
        ),
    ),
    GuideRow(
        ("gateway-paused",),
        "gateway",
        "admission is paused: requests wait, then time out",
        "`p` resumes",
    ),
    GuideRow(
        ("gateway-down",),
        "gateway",
        "the watched gateway does not answer its admin API",
        "start it, or `--gateway off`",
    ),
    GuideRow(
        ("scheduler-stuck",),
        "target",
        "requests waiting, none running, KV free, no token for 10 s while /metrics answers",
        "restart vLLM (/health still says 200)",
    ),
    GuideRow(
        ("gpu-throttled", "gpu-memory-full"),
        "gpu",
        "thermal/power throttling, memory nearly full",
        "cooling, power, other processes",
    ),
    GuideRow(
        ("target-down", "stale-data", "stats-disabled"),
        "target",
        "no answer; running but no tokens; no `vllm:*` series",
        "check the engine",
    ),
    GuideRow(
        ("replica-down",),
        "target",
        "a fleet: replicas that do not answer",
        "check them; the others carry the load",
    ),
    GuideRow(
        ("replica-out-of-rotation",),
        "target",
        (
            "the gateway took a replica out of its rotation (errors, or no /health answer "
            "within its deadline), or it came back lately; critical with none of several left"
        ),
        "check that replica (hung, crashed, answering garbage); the others take its requests",
    ),
    GuideRow(
        ("replica-slow",),
        "decode",
        (
            "a replica's answers, timed by the gateway, get tokens under 1/3 of its peers' rate "
            "(over 1 s, running streams included); info inside the ITL SLO"
        ),
        "check its GPU (throttling, another process); take it out of rotation meanwhile",
    ),
    GuideRow(
        ("gateway-shared-limits-lost",),
        "gateway",
        "Redis, which the gateways share limits through, does not answer the watched one",
        "check Redis at its URL; until it answers each gateway admits its share on its own",
    ),
    GuideRow(
        ("gateway-peer-lost",),
        "gateway",
        "fewer gateways share the limits in Redis than in the last minute (a stop, a crash)",
        "if not planned, check that gateway; its clients need a balancer reading /readyz",
    ),
    GuideRow(
        ("gateway-peer-draining",),
        "gateway",
        (
            "another gateway sharing the limits says in Redis it is draining (a SIGTERM: a "
            "rolling restart's first half); info, warning over the TTFT SLO"
        ),
        "nothing if planned: its clients' balancer must read /readyz; else find the SIGTERM",
    ),
    GuideRow(
        ("prefix-cache-collapse",),
        "prefill",
        "prefix-cache hit rate under 0.35x its level over the last minute (88 % -> 3 %)",
        "did the system prompt or the routing change?",
    ),
    GuideRow(
        ("decode-stall",),
        "prefill",
        "decode tok/s under a quarter of its running median while a prefill runs",
        "cap in-flight prompt tokens, or a lower `--max-num-batched-tokens`",
    ),
    GuideRow(
        ("spec-decode-low",),
        "decode",
        "spec decode accepts under 25 % of draft tokens, or under half its earlier level",
        "lower `num_speculative_tokens`, or serve it without `--speculative-config`",
    ),
    GuideRow(
        ("lora-waiting",),
        "queue",
        "requests wait for a LoRA adapter slot, every `--max-loras` slot held",
        "raise `--max-loras`, or route adapters to replicas",
    ),
    GuideRow(
        ("kv-transfer-failing",),
        "kv",
        "NIXL / KV-offload transfers fail",
        "check the KV connector and the offload store",
    ),
    GuideRow(
        ("engine-asleep",),
        "target",
        "vLLM's sleep mode is on (critical with requests waiting)",
        "`POST /wake_up`, or keep it out of the router",
    ),
    GuideRow(
        ("engine-unhealthy",),
        "target",
        "`vllm:engine_healthy` 0 (where exported)",
        "restart vLLM",
    ),
    GuideRow(
        ("requests-corrupted",),
        "target",
        "requests with NaN logits",
        "check dtype / quantisation and the GPU",
    ),
    GuideRow(
        ("engine-restarted",),
        "target",
        "one engine's counters went back (info, 60 s; window findings wait)",
        "check its log; the prefix cache starts cold",
    ),
    GuideRow(
        ("gpu-xid-error",),
        "gpu",
        "dcgm-exporter reports an XID or uncorrectable ECC errors",
        "drain, reset or replace the GPU",
    ),
    GuideRow(
        ("tp-gpu-idle",),
        "gpu",
        "one GPU idle while the others work",
        "check `--tensor-parallel-size` and each worker",
    ),
    GuideRow(
        ("replica-outlier", "load-imbalance"),
        "queue",
        "a fleet: one replica far above the others' median; in-flight spread unevenly",
        "check that replica; balance the router",
    ),
)
