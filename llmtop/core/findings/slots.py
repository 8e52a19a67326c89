"""The wait in an engine's own queue behind its slots, estimated where it exports no latency
(queue-wait-estimated): llama.cpp's deferred requests, its token counters and its longest
sequence.

The estimate: requests finish at about (prompt + generated tokens per second) / (tokens per
request), and the last deferred request waits for all the deferred ahead of it, so its wait is
deferred x tokens per request / tokens per second. llama.cpp counts no requests, so a request's
tokens are its longest sequence so far (`n_tokens_max`): exact for alike requests, an upper
bound where they differ (one long request early on inflates it until a restart). Its generated
tokens are counted when a request ends, so the rate needs a window holding several ends; a
window without one is not judged.
"""

from __future__ import annotations

from llmtop.core.alerts.alert import Alert
from llmtop.core.alerts.spec import AlertSpec, number
from llmtop.core.alerts.templates import open_replica, replica, value
from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import EngineStats
from llmtop.core.dialects.catalog import BY_KIND, DIALECTS, lacking
from llmtop.core.findings.definition import Definition, Guide
from llmtop.core.health.rulebase import Context, Rule, Verdict, up_engines, where
from llmtop.core.vllm.names import COUNTERS

LONGEST_SEQ = COUNTERS["longest_seq_tokens"][0]
LONGEST_NAMES = tuple(
    sorted(n for d in DIALECTS for n, ours in d.renames.items() if ours == LONGEST_SEQ)
)
"""The engines' own names of their longest sequence (llama.cpp's; the bare name first, as
Prometheus stores a sample its exposition writes without _total)."""


def estimated_wait_s(e: EngineStats) -> float | None:
    """The estimated wait of the last request in the engine's queue (None: it has a TTFT
    histogram, which degraded-200 reads, or lacks a figure the estimate needs)."""
    if lacking(e.engine, ("ttft",)) is None or not e.waiting or not e.longest_seq_tokens:
        return None
    tok_per_s = _tok_per_s(e)
    if tok_per_s <= 0:
        return None
    return e.waiting * e.longest_seq_tokens / tok_per_s


def _tok_per_s(e: EngineStats) -> float:
    """What the slots work through: prompt and generated tokens per second."""
    return (e.prompt_tok_per_s or 0.0) + (e.decode_tok_per_s or 0.0)


def queue_wait_estimated(ctx: Context) -> Verdict | None:
    s = ctx.settings
    for e in up_engines(ctx):
        wait = estimated_wait_s(e)
        if wait is None or wait <= s.slo.ttft_s:
            continue
        tok_per_s = _tok_per_s(e)
        per_s = tok_per_s / (e.longest_seq_tokens or 1.0)
        summary = (
            f"{where(ctx, e)}estimated queue wait ~{fmt.seconds(wait)} (TTFT SLO "
            f"{fmt.seconds(s.slo.ttft_s)}): {fmt.count(e.waiting)} requests wait behind "
            f"{fmt.count(e.running)} busy slots, which finish ~{per_s:.1f} requests/s "
            f"({fmt.tok_per_s(tok_per_s)} prompt + generated, requests of up to "
            f"{fmt.count(e.longest_seq_tokens)} tokens); an estimate, the engine exports no "
            "latency"
        )
        d = BY_KIND.get(e.engine or "")
        seats = d.seats.replace("with --", "with a higher --").replace(" {n}", "") if d else ""
        action = (
            "the slots are the limit: front it with llmtop gateway --autopilot (it admits by the "
            "slots and refuses at once what cannot start within the SLO), or add capacity"
            + (f" ({seats}, if memory allows)" if seats else "")
        )
        return Verdict(summary, action)
    return None


def _alert(spec: AlertSpec) -> Alert:
    """Built for every engine, it can hold only where llama.cpp's longest sequence is (on
    another engine's group the series is absent and it never fires: degraded-200 reads TTFT)."""
    r, p = spec.r, spec.p
    longest = spec.vllm(*LONGEST_NAMES)
    return Alert(
        f"{p}waiting * on ({r}) max by ({r}) ({longest})"
        f" / on ({r}) (({p}prompt_tok_per_s + on ({r}) {p}decode_tok_per_s) > 0)"
        f" > {number(spec.health.slo.ttft_s)}",
        f"{replica(spec)}: estimated queue wait ~{value('seconds')} behind its slots (an "
        "estimate: requests waiting x the longest sequence / prompt + generated tok/s)",
        open_replica(spec),
        "requests waiting x the longest sequence (n_tokens_max) / (prompt + generated tokens "
        "per second) over the TTFT SLO, as the check; only llama.cpp says its longest sequence",
    )


QUEUE_WAIT_ESTIMATED = Definition(
    Rule("queue-wait-estimated", "warning", "queue", queue_wait_estimated),
    advice="the slots are the limit: front the engine with llmtop gateway --autopilot, add "
    "slots if memory allows, or add capacity",
    guide=Guide(
        "no latency exported (llama.cpp): deferred x longest request / tok/s, an estimate, "
        "over the TTFT SLO",
        "autopilot in front (admits by slots), more slots or replicas",
    ),
    alert=_alert,
    reads=("slo.ttft_s",),
)

FINDINGS = (QUEUE_WAIT_ESTIMATED,)
