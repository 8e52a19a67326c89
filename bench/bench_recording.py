"""Recording size and cost: one hour at a 1 s refresh against the real vLLM 0.32 /metrics capture.

Simulates 3600 polls of tests/fixtures/metrics-load.txt (filtered as llmtop reads it) under steady
load: token counters grow every poll, the gauges move, every histogram observes a few requests
(its cumulative buckets move from the observed value up), ITL observes hundreds of tokens, and the
gateway's stats and a GPU reading change each poll. Budget: 5 MB per hour.

    python bench/bench_recording.py            # prints a markdown section
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtop.core.base.raw import RawEngine, RawPoll, Sample  # noqa: E402
from llmtop.core.base.snapshot import GpuStats  # noqa: E402
from llmtop.core.exposition import promtext  # noqa: E402
from llmtop.core.vllm.names import sample_names  # noqa: E402
from llmtop.recording.reader import read_recording  # noqa: E402
from llmtop.recording.replay import ReplaySource  # noqa: E402
from llmtop.recording.writer import Recorder  # noqa: E402
from llmtop.settings import HealthSettings  # noqa: E402

POLLS = 3600
BUDGET_MB = 5.0
URL = "http://127.0.0.1:8000"


class Load:
    """A steady load on one engine: rewrites the sample values poll by poll."""

    def __init__(self, base: tuple[Sample, ...], seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.base = base
        self.values = [s.value for s in base]
        self.hist: dict[str, list[tuple[float, int]]] = {}
        for i, s in enumerate(base):
            if s.name.endswith("_bucket"):
                fam = s.name.removesuffix("_bucket")
                le = dict(s.labels)["le"]
                self.hist.setdefault(fam, []).append((float(le), i))
        self.index = {s.name: i for i, s in enumerate(base) if not s.name.endswith("_bucket")}

    def _observe(self, fam: str, value: float) -> None:
        if fam not in self.hist:  # a family llmtop no longer reads is not in the samples
            return
        for le, i in self.hist[fam]:
            if value <= le:
                self.values[i] += 1
        self.values[self.index[fam + "_count"]] += 1
        self.values[self.index[fam + "_sum"]] += value

    def step(self) -> tuple[Sample, ...]:
        rng = self.rng
        v, ix = self.values, self.index
        v[ix["vllm:prompt_tokens_total"]] += rng.randint(2_000, 6_000)
        v[ix["vllm:generation_tokens_total"]] += rng.randint(800, 1_100)
        v[ix["vllm:num_requests_running"]] = rng.randint(6, 8)
        v[ix["vllm:num_requests_waiting"]] = rng.randint(20, 40)
        v[ix["vllm:kv_cache_usage_perc"]] = rng.uniform(0.85, 1.0)
        if rng.random() < 0.1:
            v[ix["vllm:num_preemptions_total"]] += 1
        for _ in range(rng.randint(1, 3)):  # finished requests
            self._observe("vllm:time_to_first_token_seconds", rng.uniform(2, 50))
            self._observe("vllm:e2e_request_latency_seconds", rng.uniform(10, 80))
            self._observe("vllm:request_queue_time_seconds", rng.uniform(1, 40))
            self._observe("vllm:request_prefill_time_seconds", rng.uniform(0.5, 8))
            self._observe("vllm:request_decode_time_seconds", rng.uniform(5, 30))
            self._observe("vllm:request_prompt_tokens", rng.randint(500, 4_000))
            self._observe("vllm:request_generation_tokens", rng.randint(100, 400))
        for _ in range(rng.randint(200, 300)):  # one ITL observation per decoded token
            self._observe("vllm:inter_token_latency_seconds", rng.uniform(0.02, 0.4))
        return tuple(Sample(s.name, s.labels, x) for s, x in zip(self.base, v, strict=True))


def gateway(i: int, rng: random.Random) -> dict[str, object]:
    """A plausible /admin/stats body: limits fixed, live state and counters moving."""
    return {
        "limits": {"max_concurrency": 8, "max_queue": 128, "queue_timeout_s": 30.0},
        "in_flight": rng.randint(6, 8),
        "queued": rng.randint(10, 30),
        "queued_by_priority": {"high": rng.randint(0, 3), "normal": rng.randint(10, 27)},
        "outcomes": {"completed": i * 2, "rejected:queue_full": i // 50, "timed_out": i // 90},
        "queue_wait_p50_s": round(rng.uniform(1, 5), 3),
        "queue_wait_p95_s": round(rng.uniform(5, 20), 3),
        "ttft_p50_s": round(rng.uniform(1, 5), 3),
        "ttft_p95_s": round(rng.uniform(5, 25), 3),
        "upstream_healthy": True,
        "paused": False,
    }


def polls(n: int) -> list[RawPoll]:
    text = (ROOT / "tests/fixtures/metrics-load.txt").read_text()
    base = promtext.parse(text, promtext.keep_names(sample_names()))
    load, rng = Load(base), random.Random(11)
    out = []
    for i in range(n):
        gpu = GpuStats(
            index=0,
            name="NVIDIA A10G",
            util_frac=round(rng.uniform(0.9, 1.0), 2),
            mem_used_bytes=20_000_000_000 + rng.randint(0, 1_000_000),
            mem_total_bytes=24_000_000_000,
            power_w=round(rng.uniform(250, 300), 1),
            temp_c=float(rng.randint(60, 70)),
        )
        out.append(
            RawPoll(
                time=1_764_400_000.0 + i,
                engines=(RawEngine(URL, load.step(), version="0.32.0", model="tinyllm"),),
                gateway_url="http://127.0.0.1:9000",
                gateway=gateway(i, rng),
                gpus=(gpu,),
            )
        )
    return out


def record(path: Path, data: list[RawPoll], keyframe_every: int) -> list[float]:
    rec = Recorder(path, interval_s=1.0, targets={"vllm": [URL]}, keyframe_every=keyframe_every)
    rec.open()
    costs = []
    for raw in data:
        t0 = time.perf_counter()
        rec.write(raw)
        costs.append(time.perf_counter() - t0)
    rec.close()
    return costs


def main() -> None:
    data = polls(POLLS)
    with tempfile.TemporaryDirectory() as d:
        rows = []
        for name, kf in (
            ("rec.jsonl.gz", 60),
            ("rec.jsonl", 60),
            ("full.jsonl.gz", 1),
        ):
            path = Path(d) / name
            costs = record(path, data, kf)
            rows.append((name, kf, path.stat().st_size, statistics.median(costs)))
        t0 = time.perf_counter()
        rec = read_recording(Path(d) / "rec.jsonl.gz")
        decoded = list(rec)
        read_s = time.perf_counter() - t0
        assert decoded == data, "round trip failed"
        t0 = time.perf_counter()
        for i in range(0, POLLS, 97):
            rec.raw(POLLS - 1 - i)
        seek_ms = (time.perf_counter() - t0) / len(range(0, POLLS, 97)) * 1e3
        t0 = time.perf_counter()
        ReplaySource(rec, HealthSettings()).snapshots()
        pipeline_s = time.perf_counter() - t0
    samples = len(data[0].engines[0].samples or ())
    print("## Recording size (bench/bench_recording.py)\n")
    print(
        f"{POLLS} polls at 1 s (one hour) of the real vLLM 0.32 capture, {samples} samples kept"
        " per poll, under steady load.\n"
    )
    print("| file | keyframe every | size | MB per hour | median write per poll |")
    print("|---|---|---|---|---|")
    for name, kf, size, cost in rows:
        print(
            f"| {name} | {kf} | {size / 1e6:.2f} MB | {size / 1e6 * 3600 / POLLS:.2f} |"
            f" {cost * 1e3:.2f} ms |"
        )
    gz = rows[0][2] / 1e6 * 3600 / POLLS
    verdict = "within" if gz <= BUDGET_MB else "OVER"
    print(f"\nDefault (.jsonl.gz, delta + keyframes): {gz:.2f} MB/hour, {verdict} the 5 MB budget.")
    print(f"Read + decode the hour: {read_s:.2f} s; a random seek: {seek_ms:.1f} ms.")
    print(
        f"Replaying the hour through a fresh Pipeline (report; replay's background thread):"
        f" {pipeline_s:.1f} s."
    )


if __name__ == "__main__":
    main()
