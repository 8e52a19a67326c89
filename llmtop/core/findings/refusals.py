"""vLLM refusing work itself with 503 (vllm-admission-rejecting): its own counter, or the
gateway's count of the 503s it passed on.
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.figures import P
from llmtop.core.alerts.spec import AlertSpec, G, duration
from llmtop.core.alerts.templates import open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict, up_engines, where

VLLM_REFUSAL_FLAGS = {
    "max_num_queued_reqs": "--max-num-queued-reqs",
    "max_num_queued_tokens": "--max-num-queued-tokens",
    "engine_queue_full": "--max-num-queued-reqs",
    "engine_token_backlog": "--max-num-queued-tokens",
}
"""vLLM's refusal reasons (its metric's, or the gateway's names for its 503s) -> its flag."""


def vllm_admission(ctx: Context) -> Verdict | None:
    """vLLM refuses work itself (503): from its own counter (0.32+) or the gateway's count."""
    g = ctx.gateway
    seen_by_gateway = (
        {k: v for k, v in g.upstream_errors_per_s.items() if k in VLLM_REFUSAL_FLAGS and v}
        if g is not None and g.up
        else {}
    )
    for e in up_engines(ctx):
        rate = e.admission_rejections_per_s or sum(seen_by_gateway.values())
        if not rate:
            continue  # the common case: no refusals, and no reasons to list
        reasons = {k: v for k, v in e.admission_rejections_by_reason_per_s.items() if v}
        return _refusal(f"{where(ctx, e)}vLLM", rate, reasons or seen_by_gateway, seen_by_gateway)
    if seen_by_gateway and not up_engines(ctx):
        return _refusal("vLLM", sum(seen_by_gateway.values()), seen_by_gateway, seen_by_gateway)
    return None


def _refusal(
    who: str, rate: float, reasons: dict[str, float], seen_by_gateway: dict[str, float]
) -> Verdict:
    flags = sorted({VLLM_REFUSAL_FLAGS[r] for r in reasons if r in VLLM_REFUSAL_FLAGS})
    flag = "/".join(flags) or "--max-num-queued-reqs/-tokens"
    passed = (
        f"; the gateway passed {fmt.per_s(sum(seen_by_gateway.values()))} of them on as 503 "
        "(not its own 429s)"
        if seen_by_gateway
        else ""
    )
    return Verdict(
        f"{who} rejects {fmt.per_s(rate)} requests itself with 503 ({flag}){passed}",
        _queue_instead(flag),
    )


def _queue_instead(flag: str) -> str:
    """The advice, check's and alert's: vLLM's own refusals are the gateway's to queue."""
    return (
        "queue in the llmtop gateway instead (priorities, timeouts, live limits): keep its "
        f"max_concurrency at or below vLLM's --max-num-seqs, or raise vLLM's {flag}"
    )


def _vllm_admission_alert(spec: AlertSpec) -> Alert:
    r, w = spec.r, duration(spec.window_s)
    refused = spec.gateway(
        G + "upstream_errors_total",
        'reason=~"engine_queue_full|engine_token_backlog|max_num_queued_reqs|'
        'max_num_queued_tokens"',
    )
    return Alert(
        f"{P}admission_rejections_per_s > 0 or sum by ({r}) (rate({refused}[{w}])) > 0",
        f"{replica(spec)}: vLLM rejects {value('rate')} requests/s itself with 503 "
        "(--max-num-queued-reqs/-tokens), counted by vLLM or by the gateway passing them on",
        open_replica(spec),
        "vLLM's admission_rejections_total rising (0.32+), or the gateway's count of the "
        "503s it passed on",
        action=_queue_instead("--max-num-queued-reqs/-tokens"),
    )


VLLM_ADMISSION_REJECTING = Definition(
    Rule("vllm-admission-rejecting", "warning", "queue", vllm_admission),
    guide=Guide(
        "vLLM's own `--max-num-queued-reqs` answers 503s",
        "let the gateway queue instead, or raise the limit",
    ),
    alert=_vllm_admission_alert,
)

FINDINGS = (VLLM_ADMISSION_REJECTING,)
