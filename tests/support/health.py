"""The health rules on scripted series: a healthy engine's figures (`healthy`, changed by keyword),
`run` feeding a series through the rules one poll a second, `ids` of the findings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, GpuStats, Snapshot
from llmtop.core.findings.catalog import HealthState
from llmtop.core.health.rulebase import Context
from llmtop.settings import HealthSettings

URL = "http://e"
S = HealthSettings()  # fire after 3 s, clear after 10 s, window 10 s


def healthy(**kw: object) -> EngineStats:
    base = EngineStats(
        url=URL,
        up=True,
        running=8,
        waiting=0,
        waiting_capacity=0,
        kv_cache_usage_frac=0.45,
        kv_capacity_tokens=38_800,
        prompt_tok_per_s=4000,
        decode_tok_per_s=270,
        decode_tok_per_s_per_seq=34,
        preemptions_per_s=0,
        finished_per_s={"stop": 2.0, "error": 0.0},
        mean_prompt_tokens=1000,
        mean_generation_tokens=300,
        ttft_p50_s=0.2,
        ttft_p95_s=0.6,
        ttft_p99_s=0.9,
        itl_p95_s=0.035,
        ttft_mean_s=0.25,
        queue_time_mean_s=0.01,
        prefill_time_mean_s=0.2,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def run(
    series: Iterable[EngineStats | tuple[EngineStats, GatewayStats | None, tuple[GpuStats, ...]]],
    settings: HealthSettings = S,
    dt: float = 1.0,
) -> list[tuple[Finding, ...]]:
    """Feed one EngineStats (or engine, gateway, gpus) per poll; return each poll's findings."""
    state = HealthState(settings)
    history: list[Snapshot] = []
    out = []
    for i, item in enumerate(series):
        e, gw, gpus = item if isinstance(item, tuple) else (item, None, ())
        t = i * dt
        ctx = Context(
            time=t, engines=(e,), gateway=gw, gpus=gpus, settings=settings, history=history
        )
        findings = state.evaluate(ctx)
        history.append(Snapshot(time=t, engines=(e,), gateway=gw, gpus=gpus, findings=findings))
        out.append(findings)
    return out


def ids(findings: tuple[Finding, ...]) -> list[str]:
    return [f.id for f in findings]
