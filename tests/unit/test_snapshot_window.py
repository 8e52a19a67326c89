"""`llmtop snapshot` over a window, in virtual time (no sockets): the poll schedule, which rule
can fire from how long a window (as docs/snapshot.md states it), and figures and verdict that
name their poll and agree, in text and JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.base import format as fmt
from llmtop.core.base.raw import RawEngine, RawPoll, Sample
from llmtop.core.base.snapshot import GpuStats
from llmtop.core.base.window import WindowSnapshot
from llmtop.core.output.summary import EXIT_CODES, to_json, to_text
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.pipeline.verdict import judge_window, window_settings
from llmtop.settings import HealthSettings, SloSettings
from llmtop.sources.window_reader import read_window

URL = "http://e"
T0 = 1_796_000_000.0
HEALTH = HealthSettings()
LAB = (("engine", "0"), ("model_name", "m"))


def engine(
    *,
    running: float = 4,
    waiting: float = 0,
    kv: float = 0.3,
    generated: float = 0.0,
    preempted: float = 0.0,
    waiting_capacity: float | None = None,
) -> RawEngine:
    """One scrape of a vLLM 0.32 engine: gauges as given, counters cumulative."""

    def s(name: str, value: float, labels: tuple[tuple[str, str], ...] = LAB) -> Sample:
        return Sample(name, labels, value)

    samples = [
        s("vllm:num_requests_running", running),
        s("vllm:num_requests_waiting", waiting),
        s("vllm:kv_cache_usage_perc", kv),
        s("vllm:cache_config_info", 1, (("block_size", "16"), ("num_gpu_blocks", "2000"))),
        s("vllm:generation_tokens_total", generated),
        s("vllm:prompt_tokens_total", generated * 4),
        s("vllm:num_preemptions_total", preempted),
    ]
    if waiting_capacity is not None:
        samples.append(
            s(
                "vllm:num_requests_waiting_by_reason",
                waiting_capacity,
                (*LAB, ("reason", "capacity")),
            )
        )
    return RawEngine(URL, tuple(samples))


Made = RawEngine | tuple[RawEngine, tuple[GpuStats, ...]]


def polls(n: int, make: Callable[[int], Made], interval_s: float = 1.0) -> list[RawPoll]:
    """Polls 0..n-1, `interval_s` apart; make(i) -> RawEngine or (RawEngine, gpus)."""
    out = []
    for i in range(n):
        made = make(i)
        eng, gpus = made if isinstance(made, tuple) else (made, ())
        out.append(RawPoll(time=T0 + i * interval_s, engines=(eng,), gpus=gpus))
    return out


def ids(w: WindowSnapshot) -> set[str]:
    return {f.finding.id for f in w.findings}


# --- the schedule -------------------------------------------------------------------------


class FakeTime:
    """A clock, a sleep that overshoots like a real one, and a read that takes time."""

    def __init__(self, read_s: float = 0.01, overshoot_s: float = 0.002) -> None:
        self.t = T0
        self.read_s = read_s
        self.overshoot_s = overshoot_s
        self.slow: dict[int, float] = {}
        self.reads = 0
        self.answers = True

    def clock(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.t += s + self.overshoot_s

    async def read(self) -> RawPoll:
        t = self.t
        self.t += self.slow.get(self.reads, self.read_s)
        self.reads += 1
        samples = () if self.answers else None
        return RawPoll(time=t, engines=(RawEngine(URL, samples),))


def offsets(raws: list[RawPoll]) -> list[float]:
    return [round(r.time - raws[0].time, 3) for r in raws]


def test_polls_every_interval_and_the_last_at_the_end() -> None:
    ft = FakeTime()
    raws = asyncio.run(read_window(ft.read, ft.clock, 15.0, 1.0, ft.sleep))
    assert ft.reads == 17  # the warm-up read, whose time stamp runs ahead of what it read
    assert raws[0].time == T0 + ft.read_s
    assert len(raws) == 16
    assert offsets(raws) == [0.0] + [round(k + 0.002, 3) for k in range(1, 16)]
    assert raws[-1].time - raws[0].time >= 15.0  # never short of the window


def test_a_window_shorter_than_the_interval_polls_at_both_ends() -> None:
    ft = FakeTime()
    raws = asyncio.run(read_window(ft.read, ft.clock, 0.6, 1.0, ft.sleep))
    assert offsets(raws) == [0.0, 0.602]


def test_a_slow_poll_moves_the_next_to_the_next_due_time() -> None:
    ft = FakeTime()
    ft.slow = {3: 2.5}  # the poll due at +2 s (read 3, after the warm-up) takes 2.5 s
    raws = asyncio.run(read_window(ft.read, ft.clock, 6.0, 1.0, ft.sleep))
    assert offsets(raws) == [0.0, 1.002, 2.002, 5.002, 6.002]


def test_no_engine_answering_stops_after_one_poll() -> None:
    ft = FakeTime()
    ft.answers = False
    raws = asyncio.run(read_window(ft.read, ft.clock, 15.0, 1.0, ft.sleep))
    assert len(raws) == 1
    w = judge_window(raws, HEALTH, 1.0)
    assert w.status == "unknown"
    assert ids(w) == {"target-down"}
    assert "one poll: no engine answered" in to_text(w)


# --- the shortest window of each rule (docs/snapshot.md, "Findings") -----------------------


def cliff(i: int) -> RawEngine:
    """4 running at a flat 100 tok/s while the queue grows by 2 a second."""
    return engine(running=4, waiting=2 * i, generated=100.0 * i)


def test_batching_cliff_from_a_window_of_more_than_two_intervals() -> None:
    # The first poll has no rates: the rule compares with the second, and that one must be
    # at least half the window before the last.
    assert "batching-cliff" not in ids(judge_window(polls(3, cliff), HEALTH, 1.0))  # 2 s
    assert "batching-cliff" in ids(judge_window(polls(4, cliff), HEALTH, 1.0))  # 3 s
    w = judge_window(polls(16, cliff), HEALTH, 1.0)  # 15 s
    f = next(f for f in w.findings if f.finding.id == "batching-cliff")
    e = w.last.engines[0]
    # its figures are the printed ones: the last poll's waiting and decode rate
    assert f"-> {fmt.count(e.waiting)} in 14 s" in f.finding.summary
    assert f"decode stays at {fmt.tok_per_s(e.decode_tok_per_s)}" in f.finding.summary
    assert f.last_s == w.span_s
    assert w.status == "degraded"


def test_stale_data_needs_stale_after_s() -> None:
    def hung(i: int) -> RawEngine:
        return engine(running=4, generated=500.0)  # requests running, no token counted

    assert "stale-data" not in ids(judge_window(polls(15, hung), HEALTH, 1.0))  # 14 s
    w = judge_window(polls(16, hung), HEALTH, 1.0)  # 15 s
    assert "stale-data" in ids(w)
    assert w.status == "critical"


def test_decode_bound_from_three_polls() -> None:
    # 1 running at 34 tok/s, then 128 sharing 1,041 tok/s: 8.1 tok/s each
    def make(i: int) -> RawEngine:
        return engine(running=1 if i < 2 else 128, generated=[0, 34, 34 + 1041 * 4][i])

    two = polls(2, make)
    assert "decode-bound" not in ids(judge_window(two, HEALTH, 1.0))
    w = judge_window([*two, RawPoll(time=T0 + 5.0, engines=(make(2),))], HEALTH, 1.0)
    assert "decode-bound" in ids(w)


# --- figures and verdict agree, and name their polls ---------------------------------------


def test_a_finding_that_cleared_stays_apart_with_its_own_poll() -> None:
    """gpu-throttled holds at polls 2..4 (92 °C at the last of them), then clears."""

    def make(i: int) -> tuple[RawEngine, tuple[GpuStats, ...]]:
        hot = 2 <= i <= 4
        gpu = GpuStats(index=0, temp_c=88.0 + i, throttle_reasons=("hw_thermal",) if hot else ())
        return engine(generated=50.0 * i), (gpu,)

    raws = polls(11, make)
    w = judge_window(raws, HEALTH, 1.0)
    # The verdict: the last poll's, where nothing holds.
    assert w.status == "ok"
    assert w.findings == ()
    assert EXIT_CODES[w.status] == 0
    (earlier,) = w.earlier
    assert (earlier.finding.id, earlier.first_s, earlier.last_s, earlier.held_polls) == (
        "gpu-throttled",
        2.0,
        4.0,
        3,
    )
    # It is what the rules said at poll 4 (not 2 or 3): the same pipeline, stopped there.
    p = Pipeline(window_settings(HEALTH, w.span_s))
    at_4 = [p.update(r) for r in raws[:5]][-1]
    assert earlier.finding == next(f for f in at_4.findings if f.id == "gpu-throttled")
    assert fmt.celsius(92.0) in earlier.finding.summary

    text = to_text(w)
    head, _, tail = text.partition("earlier in the window")
    assert "no findings at the last poll" in head
    assert "gpu-throttled" not in head
    assert "throttled" not in head  # the printed GPU is the last poll's: not throttled
    assert fmt.celsius(98.0) in head
    assert earlier.finding.summary in tail
    assert "held from +2.0 s to +4.0 s (3 of 11 polls)" in tail

    data = json.loads(json.dumps(to_json(w), allow_nan=False))
    assert data["status"] == "ok"
    assert data["findings"] == []
    assert data["gpus"][0]["throttle_reasons"] == []
    assert data["window"] == {
        "start": "2026-11-30T00:53:20Z",
        "span_s": 10.0,
        "polls": 11,
        "interval_s": 1.0,
    }
    assert data["time"] == "2026-11-30T00:53:30Z"
    (e_json,) = data["earlier_findings"]
    assert {k: e_json[k] for k in ("id", "first_s", "last_s", "held_polls")} == {
        "id": "gpu-throttled",
        "first_s": 2.0,
        "last_s": 4.0,
        "held_polls": 3,
    }
    assert e_json["summary"] == earlier.finding.summary


def test_kv_exhausted_reads_the_printed_peak() -> None:
    """KV 95% with 3 waiting at poll 1, 60% after: the rule fires on the peak, which is shown."""

    def make(i: int) -> RawEngine:
        return engine(kv=0.95 if i == 1 else 0.6, waiting=3, generated=40.0 * i)

    w = judge_window(polls(6, make), HEALTH, 1.0)
    assert "kv-exhausted" in ids(w)
    f = next(f.finding for f in w.findings if f.finding.id == "kv-exhausted")
    assert f"KV cache {fmt.frac(0.95)} full" in f.summary
    text = to_text(w)
    assert f"KV {fmt.frac(0.6)} (peak {fmt.frac(0.95)} at +1.0 s)" in text
    (e,) = to_json(w)["engines"]
    assert (e["kv_cache_usage_frac"], e["kv_cache_usage_peak_frac"]) == (0.6, 0.95)
    assert e["kv_cache_usage_peak_s"] == 1.0


def kv_pressed_per_json(e: dict[str, object], kv_high_frac: float) -> bool:
    """kv-exhausted's condition, read from the printed JSON figures only."""
    waiting = e["waiting_capacity"] if e["waiting_capacity"] is not None else e["waiting"]
    peak = e["kv_cache_usage_peak_frac"]
    assert isinstance(peak, float | int)
    return peak >= kv_high_frac and bool(e["preemptions_per_s"] or waiting)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.5, 0.89, 0.9, 0.97, 1.0]),  # KV usage
            st.integers(0, 3),  # waiting
            st.sampled_from([None, 0, 2]),  # waiting for capacity (vLLM >= 0.20)
            st.sampled_from([0, 0, 1]),  # preemptions since the previous poll
        ),
        min_size=2,
        max_size=8,
    )
)
def test_kv_exhausted_iff_its_condition_holds_on_the_printed_figures(
    steps: list[tuple[float, int, int | None, int]],
) -> None:
    preempted = 0.0
    raws = []
    for i, (kv, waiting, capacity, pre) in enumerate(steps):
        preempted += pre if i else 0
        raws.append(
            RawPoll(
                time=T0 + i,
                engines=(
                    engine(
                        kv=kv,
                        waiting=waiting,
                        waiting_capacity=capacity,
                        preempted=preempted,
                        generated=30.0 * i,
                    ),
                ),
            )
        )
    data = to_json(judge_window(raws, HEALTH, 1.0))
    fired = any(f["id"] == "kv-exhausted" for f in data["findings"])
    assert fired == kv_pressed_per_json(data["engines"][0], HEALTH.kv_high_frac), data


def test_every_finding_names_the_poll_its_figures_are_from() -> None:
    # a cliff that held from +9 s: the JSON says so, and the last poll is the one it shows
    data = to_json(
        judge_window(polls(16, cliff), replace(HEALTH, slo=SloSettings(ttft_s=60.0)), 1.0)
    )
    f = next(f for f in data["findings"] if f["id"] == "batching-cliff")
    assert f["last_s"] == data["window"]["span_s"] == 15.0
    assert f["first_s"] == 9.0  # the first poll at least half the window after the second
    assert f["held_polls"] == 7
