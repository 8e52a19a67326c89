"""A scripted incident as a recording, for the report and replay tests.

`scripted_polls`: three minutes of one engine behind the gateway, healthy, then KV exhaustion
with TTFT toward 40 s, then the gateway capped from 64 to 8 at +120 s (`CAP_AT`) and the engine
recovering while the excess queues in the gateway; `write_scripted` records it to a file.
"""

from __future__ import annotations

from pathlib import Path

from llmtop.core.base.raw import RawEngine, RawPoll, Sample
from llmtop.recording.writer import Recorder

T0 = 1_764_439_200.0
URL = "http://127.0.0.1:8000"
GW = "http://127.0.0.1:9000"
LABELS = (("engine", "0"), ("model_name", "tinyllm"))
LES = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, float("inf"))
CAP_AT = 120


def scripted_polls(n: int = 180) -> list[RawPoll]:
    """n one-second polls of the scripted incident (see the module docstring)."""
    buckets = [0.0] * len(LES)
    count = total = gen = prompt = 0.0
    polls = []
    for i in range(n):
        waiting, kv, ttft, gw_ttft, queued, cap = _phase(i)
        for _ in range(2):  # two requests get their first token each second
            for j, le in enumerate(LES):
                if ttft <= le:
                    buckets[j] += 1
            count, total = count + 1, total + ttft
        gen, prompt = gen + 300, prompt + 2_000
        fam = "vllm:time_to_first_token_seconds"
        samples = [
            Sample("vllm:num_requests_running", LABELS, 8.0),
            Sample("vllm:num_requests_waiting", LABELS, waiting),
            Sample("vllm:kv_cache_usage_perc", LABELS, kv),
            Sample("vllm:generation_tokens_total", LABELS, gen),
            Sample("vllm:prompt_tokens_total", LABELS, prompt),
            *(
                Sample(f"{fam}_bucket", tuple(sorted((*LABELS, ("le", _le(le))))), b)
                for le, b in zip(LES, buckets, strict=True)
            ),
            Sample(f"{fam}_count", LABELS, count),
            Sample(f"{fam}_sum", LABELS, total),
        ]
        gateway = {
            "in_flight": 8,
            "queued": queued,
            "limits": {"max_concurrency": cap, "max_queue": 128, "queue_timeout_s": 30.0},
            "ttft_s": {"p50": gw_ttft / 2, "p95": gw_ttft},
            "queue_wait_s": {"p50": 0.0, "p95": 0.0},
            "paused": False,
            "outcomes": {"completed": 2 * i},
            "rejections": {},
        }
        events = (
            {"time": T0 + CAP_AT, "field": "max_concurrency", "old": 64, "new": 8, "source": "tui"},
        )
        polls.append(
            RawPoll(
                time=T0 + i,
                engines=(RawEngine(URL, tuple(samples), version="0.32.0", model="tinyllm"),),
                gateway_url=GW,
                gateway=gateway,
                events=events if i == CAP_AT else (),
            )
        )
    return polls


def write_scripted(path: Path, n: int = 180) -> Path:
    """A recording of `scripted_polls(n)` at `path`."""
    rec = Recorder(path, interval_s=1.0, targets={"vllm": [URL], "gateway": GW})
    rec.open()
    for raw in scripted_polls(n):
        rec.write(raw)
    rec.close()
    return path


def _phase(i: int) -> tuple[float, float, float, float, int, int]:
    """(waiting, kv, ttft_s, gateway ttft_s, gateway queued, max_concurrency) at second i."""
    if i < 60:
        return 0.0, 0.3, 0.4, 0.45, 0, 64
    if i < CAP_AT:
        return 30.0, 0.99, 35.0, 36.0, 0, 64
    return 0.0, 0.5, 0.8, 6.0, 20, 8


def _le(le: float) -> str:
    return "+Inf" if le == float("inf") else str(le)
