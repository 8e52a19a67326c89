"""The `?` screen: the keys, what each panel shows, and what each finding means and asks for."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from llmtop.tui.view.keyhelp import KEYS

KEY_LINES = "\n".join(f"- {k.keys} — {k.does}" for k in KEYS)

HELP_TEXT = f"""\
## Keys
{KEY_LINES}
- Typing `:cap N` shows the what-if prediction for N beside the measured figures before Enter
  applies it; any limit set by hand switches the autopilot back to manual, and says so
- In `llmtop replay`: space play/pause, `,` / `.` step one poll, left/right seek, Home/End,
  `<` / `>` speed x1..x60; the keys above that change limits only say "read-only"

With `--read-only` every key that changes something only says "read-only". A change the
gateway refuses (down, 401, 400) is shown in red and written to the event log.

## Panels
- **Header**: the status badge (OK, DEGRADED, CRITICAL, DOWN), model, target, vLLM version and
  the age of the data. `STALE` means no fresh poll for two intervals: do not trust the numbers.
- **Findings**: the active problems, most severe first: which resource binds, the evidence,
  and (after the arrow) what to do.
- **KV cache**: usage of the engine's KV cache, its capacity in tokens, preemptions per second
  (requests evicted and recomputed) and how many requests fit at what size (the mean prompt +
  output, or `held`: what running sequences held), the number kv-exhausted suggests.
- **Sequences**: where the queue is. `engine run/wait` is vLLM's running and waiting
  requests; `gateway fly/queue` is in flight/cap and queued/max in the llmtop gateway. A queue
  in the ENGINE inflates TTFT for everyone; a queue in the GATEWAY protects the engine.
- **Latency**: time to first token (TTFT), inter-token latency (ITL) and engine queue time, at
  p50/p95/p99 over the last window; p95 is red above its SLO.
- **Throughput**: prefill (prompt) and decode (generated) tokens per second, decode speed per
  sequence (what one user sees stream) and finished requests per second.
- **Gateway**: the mode in its title (manual / auto, PAUSED), in flight/cap, queued/max,
  429s per second by reason, queue wait p95; in manual mode the queue timeout and rpm limit,
  in auto mode the KV budget (blocks), the prefill budget (tokens) and which one holds the
  queue now (else the cause of the autopilot's last move), in manual mode the limit holding
  the queue; and, when
  the gateway's SLO differs from this screen's, admission overrides it, a deadline queue or
  tenant budgets are set, one SLO line (`slo 2.00s  wait ≤1.60s (engine 400ms)`).
- **GPU**: per device utilisation, memory used/total, memory-bandwidth utilisation, power,
  temperature and throttle reasons; or why no GPU is visible.
- **Events**: the incident timeline: findings firing and clearing, limit changes (by anyone),
  failed changes, targets going down and coming back.
- **Charts** (on larger terminals): throughput and TTFT p95 against its SLO over the last minutes.

## Findings
- **kv-exhausted**: the KV cache is full and requests are preempted or waiting for memory.
  Lower the gateway cap (`-` or `:cap N`) so fewer sequences share the cache. N = the KV
  tokens at the target fill (`kv_target_frac`, 90%) / tokens per request, in whole blocks.
  Per request is the larger of the mean prompt + output of the requests that finished, and
  the KV each running sequence held (usage x capacity / running, the most in the last
  minute): with short chats beside long prompts the mean is the chats', while the cache is
  filled by the long prompts, which stay longest. The 10% left over is room for requests
  longer than that, answers still growing and vLLM's free-block watermark: a cap at the exact
  quotient kept requests waiting. The finding prints the figures it used.
- **degraded-200**: requests succeed (200 OK) but TTFT/ITL are over the SLO. The users suffer
  while error-rate alerts stay green. Look at the other findings for the cause.
- **batching-cliff**: more sequences run than the engine batches efficiently: TTFT and ITL
  explode while aggregate throughput stops growing. Cap concurrency at the knee (`:cap N`).
- **decode-bound**: decode tokens dominate; per-sequence speed falls as concurrency rises.
  Cap concurrency or cap max tokens per request.
- **prefill-bound**: long prompts dominate; prefill stalls decodes. Cap in-flight prompt tokens
  (`:tokens N`) or enable chunked prefill.
- **gateway-saturated**: the gateway queue is long or its wait exceeds the SLO, or it is
  answering 429s. Raise the cap only if the engine has headroom, and no higher than what the
  KV cache holds, sized as kv-exhausted sizes it; else add capacity.
- **gateway-queue-over-slo**: requests in the gateway's own queue have waited past the TTFT
  SLO (the oldest age, and how many of those queued): their clients are late though vLLM
  looks healthy. Raise the cap if the engine has KV headroom (to what the KV cache holds,
  with the arithmetic); else add capacity, or let the autopilot (`a`) refuse early.
- **vllm-admission-rejecting**: vLLM's own admission limit (`--max-num-queued-reqs`) is
  answering 503s. Let the gateway queue instead, or raise the limit.
- **gateway-paused**: admission is paused: requests wait, then time out. `p` resumes.
- **gateway-down**: the gateway does not answer its admin API; the admission keys fail.
- **replica-out-of-rotation**: the gateway took a replica out (errors, or no /health answer in
  its deadline: hung) or it came back lately; the others take its requests.
- **replica-slow**: a replica's answers, as the gateway times them, come at under a third of
  its peers' rate: check its GPU; take it out of rotation meanwhile.
- **gateway-shared-limits-lost**: Redis does not answer: each gateway admits its share alone,
  so the global cap may be exceeded or left unused. Check Redis.
- **gateway-peer-lost**: fewer gateways share the limits than a minute ago: a peer stopped or
  crashed. Check it, if it was not planned.
- **gpu-throttled**: a GPU is throttling (thermal, power cap): check cooling and power limits.
- **gpu-memory-full**: a GPU's memory is nearly full outside the KV cache: another process?
- **target-down**: the engine does not answer its /metrics. Check the process and the URL.
- **stats-disabled**: the engine answers but exports no vllm:* series (started with
  `--disable-log-stats`): restart it without that flag.
- **scheduler-stuck**: the engine answers, requests wait, nothing runs, the KV cache has
  room, and no token has been made for `scheduler_stuck_after_s` (10 s): its scheduler admits
  nothing, and /health still says 200. Restart vLLM.
- **stale-data**: no fresh data for two intervals (the header says STALE): the numbers on
  screen are old; a poll is hanging or failing.

Severity follows the SLO: CRIT and WARN mean users miss it now or are about to (the finding
says the trend); INFO is a heads-up while it holds (a full cache, a queue, a slowdown), with
its headroom.

- **prefix-cache-collapse**: the prefix cache's hit rate fell to a fraction of its level: the
  same load costs several times the prefill. Did the system prompt or the routing change?
- **decode-stall**: decode tok/s fell under a quarter of its running median while a prefill
  runs: long prompts freeze the decoders. Cap in-flight prompt tokens.
- **spec-decode-low**: speculative decoding accepts too few draft tokens to pay for them.
- **lora-waiting**: requests wait for a LoRA adapter slot (`--max-loras`).
- **kv-transfer-failing**: the KV connector (NIXL, offload) fails transfers.
- **engine-asleep**: vLLM's sleep mode is on (header ASLEEP); it serves nothing until woken.
- **engine-unhealthy**: the engine reports itself unhealthy (`engine_healthy` 0).
- **requests-corrupted**: requests with NaN logits: answers that are garbage.
- **engine-restarted**: the engine's counters went back (header RESTARTED): rates carry
  across; findings that compare with an earlier level wait for the new process.
- **gpu-xid-error**: a GPU reported an XID or uncorrectable ECC error.
- **tp-gpu-idle**: one GPU idle while the others work: a tensor-parallel rank stopped?
"""


class HelpScreen(ModalScreen[None]):
    """Keys, panels and findings explained; Esc, q or ? close it."""

    AUTO_FOCUS = "VerticalScroll"
    """Focused, so that the arrow and page keys scroll it (the app focuses nothing itself)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        border-title-align: center;
        width: 100%;
        max-width: 110;
        height: 100%;
        border: round $primary;
        background: $surface;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "llmtop help · Esc closes · ↑↓ scroll"
            yield Markdown(HELP_TEXT)

    def action_close(self) -> None:
        self.dismiss(None)
