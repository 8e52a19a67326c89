"""`prometheus_history` against a real Prometheus: one that scrapes a real `llmtop sim` under
load (the live queries over a range decode to the replica's figures), and that also holds the
demo's incident 10 minutes long, backfilled with `promtool tsdb create-blocks-from openmetrics`
from the recorded run lengthened in virtual time (tests/support/past_story.py): its past, folded
as the console folds it, shows the onset, kv-exhausted's first firing and the cap set (from the
gateway's limit gauges backfilled beside it, out of the story's recorded /admin/stats). Faults:
a query that fails, one that is slow, a Prometheus that is not there or not one: named, the
rest kept, one line, nothing read as healthy.

The binaries come from PATH (Debian's prometheus package) or .ci/install-system-tools; else
the test is skipped, saying why. Bounded: ~20 s.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import httpx
import pytest

from harness.http_ready import wait_ready
from harness.system_tools import system_binary
from llmtop.core.base.raw import RawPoll
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.past import PastFold
from llmtop.errors import TargetError
from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings
from llmtop.sources.prometheus_history import (
    GATEWAY_METRICS,
    WHO_UNKNOWN,
    RangeFetch,
    prometheus_history,
)
from llmtop.tui.view.past import past_events
from tests.support import past_story

pytestmark = [
    pytest.mark.slow(20),
    pytest.mark.timeout(180),
    pytest.mark.xdist_group("realtime-load"),
]
STORY = "story:8000"
"""The instance label of the backfilled run."""
GATEWAY = "gateway:9000"
"""The instance label of its gateway's backfilled gauges."""


@dataclass
class Stack:
    prometheus: str
    sim: str
    """The sim's instance (host:port) as Prometheus labels it."""
    opened: float
    """The time the console opens on the backfilled run: 10 minutes after its onset."""


def _gateway_openmetrics(polls: Sequence[RawPoll]) -> str:
    """The gateway's limit gauges and `_paused` as its /metrics exposes them (a limit that is
    off has no gauge), from each poll's recorded /admin/stats, as OpenMetrics with timestamps."""
    series: dict[str, list[tuple[float, float]]] = {}
    for raw in polls:
        stats = raw.gateway
        if stats is None:
            continue
        limits = stats.get("limits") or {}
        series.setdefault("llmtop_gateway_paused", []).append((raw.time, float(stats["paused"])))
        for name, field in GATEWAY_METRICS.items():
            if limits.get(field) is not None:
                series.setdefault(name, []).append((raw.time, float(limits[field])))
    lines: list[str] = []
    for name, points in sorted(series.items()):
        lines.append(f"# TYPE {name} gauge")
        labels = f'instance="{GATEWAY}",job="gateway"'
        lines += [f"{name}{{{labels}}} {v!r} {t:.3f}" for t, v in points]
    return "\n".join(lines) + "\n"


def _scraped(prom: str, job: str, scrapes: int, deadline_s: float) -> None:
    query = f'count_over_time(up{{job="{job}"}}[1m]) >= {scrapes}'
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = httpx.post(f"{prom}/api/v1/query", data={"query": query}, timeout=5).json()
        if got["data"]["result"]:
            return
        time.sleep(0.3)
    raise AssertionError(f"Prometheus did not scrape {job} {scrapes} times in {deadline_s} s")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus, promtool = system_binary("prometheus"), system_binary("promtool")
    tmp = tmp_path_factory.mktemp("prom")
    polls = past_story.polls()
    opened = past_story.opened_at()
    engines = past_story.openmetrics(polls[:opened], STORY).removesuffix("# EOF\n")
    (tmp / "story.om").write_text(engines + _gateway_openmetrics(polls[:opened]) + "# EOF\n")
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "story.om", "tsdb"],
        cwd=tmp,
        check=True,
        capture_output=True,
        timeout=60,
    )
    procs: list[subprocess.Popen[str]] = []
    try:
        sim = subprocess.Popen(
            [sys.executable, "-m", "llmtop", "sim", "--port", "0", "--kv-tokens", "8192"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(sim)
        assert sim.stdout is not None
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", sim.stdout.readline())
        assert m, "no banner from llmtop sim"
        sim_url = m.group(1)
        wait_ready(sim_url + "/metrics", 20)
        load = ["--url", sim_url, "--duration-s", "60", "--requests", "5000", "--concurrency", "4"]
        load += ["--output-tokens", "32"]  # requests end and start: first tokens each second
        command = [sys.executable, "-m", "llmtop", "load", *load]
        out = subprocess.DEVNULL
        procs.append(subprocess.Popen(command, stdout=out, stderr=out, text=True))
        target = sim_url.removeprefix("http://")
        (tmp / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sim\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        port = free_port()
        procs.append(
            subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    "--storage.tsdb.retention.time=100y",  # the backfilled run is days old
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
        prom = f"http://127.0.0.1:{port}"
        wait_ready(prom + "/-/ready", 30)
        _scraped(prom, "sim", 3, 30)
        yield Stack(prom, target, polls[opened].time)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def test_the_live_queries_over_a_range_read_a_real_sim(stack: Stack) -> None:
    rec = asyncio.run(
        prometheus_history(stack.prometheus, 20.0, selector='{job="sim"}', window_s=5.0)
    )
    assert 3 <= len(rec) <= 21  # from the sim's first scrapes on
    steps = {round(b - a, 3) for a, b in zip(rec.times, rec.times[1:], strict=False)}
    assert steps == {1.0}  # a second apart
    assert rec.header["targets"]["prometheus"] == stack.prometheus
    unknown = "prometheus history: no llmtop gateway series (llmtop_gateway_limit_*) in this"
    assert unknown + " Prometheus (limit changes unknown)" in rec.warnings  # it scrapes none
    assert not any(rec.raw(i).events for i in range(len(rec)))
    last = rec.raw(len(rec) - 1).prometheus
    assert last is not None
    (row,) = last.rows
    assert row.replica == stack.sim
    assert row.model == "llmtop-sim"
    assert row.kv_blocks
    assert (row.figures["running"] or 0) > 0  # the load generator's 4 streams
    assert (row.figures["generation_tokens"] or 0) > 0
    answers = [rec.raw(i).prometheus for i in range(len(rec))]
    ttft = [r.figures.get("q_ttft_p95") for a in answers if a is not None for r in a.rows]
    assert any(v is not None for v in ttft)  # a first token in some window of the range
    pipeline = FleetPipeline(HealthSettings(window_s=5.0))
    PastFold(pipeline, list(rec)).run()
    assert pipeline.fleet is not None
    (replica,) = pipeline.fleet.replicas
    assert replica.stats.up
    assert replica.stats.decode_tok_per_s


def test_the_incident_10_minutes_in_from_prometheus(stack: Stack) -> None:
    """The target of issue 46 from Prometheus: the past shows the onset, the finding's first
    firing and the cap set (from the gateway's gauges: who set it is not in Prometheus)."""
    rec = asyncio.run(
        prometheus_history(
            stack.prometheus, 900.0, until=stack.opened, selector='{job="vllm"}', window_s=60.0
        )
    )
    assert rec.warnings == ["prometheus history: it holds 11m of the 15m asked"]
    fold = PastFold(FleetPipeline(HealthSettings()), list(rec))
    fold.run()
    assert fold.snapshots[-1].time - fold.snapshots[0].time > 600
    lines = past_events(fold.snapshots, fold.who, fold.unseen)
    first = {e.text.split(" (")[0].split(" ", 1)[1]: e.time for e in lines if e.kind == "fired"}
    onset = past_story.polls()[past_story.ONSET].time
    assert "kv-exhausted" in first
    assert abs(first["kv-exhausted"] - onset) < 15  # Prometheus' 60 s rates, not a 10 s window
    assert "degraded-200" in first
    assert abs(first["degraded-200"] - onset) < 30
    (limit,) = [e for e in lines if e.kind == "limit"]
    assert limit.text == f"limits (before you connected): cap 256 -> 9 ({WHO_UNKNOWN})"
    assert 0 <= limit.time - past_story.polls()[151].time <= 1.0  # the next 1 s step


def _wrapped(fail: str | None = None, slow: str | None = None) -> RangeFetch:
    """A fetch over real HTTP that fails the query containing `fail` (HTTP 422 as Prometheus
    says it) or holds the one containing `slow` past the timeout."""

    async def fetch(endpoint: str, form: dict[str, str]) -> tuple[int, bytes]:
        if fail and fail in form["query"]:
            return 422, b'{"status":"error","errorType":"execution","error":"query timed out"}'
        if slow and slow in form["query"]:
            await asyncio.sleep(10)
        async with httpx.AsyncClient() as client:
            r = await client.post(endpoint, data=form, timeout=30)
            return r.status_code, r.content

    return fetch


def test_a_query_that_fails_or_is_slow_is_named_and_the_rest_kept(stack: Stack) -> None:
    partial = asyncio.run(
        prometheus_history(
            stack.prometheus,
            120.0,
            until=stack.opened,
            selector='{job="vllm"}',
            fetch=_wrapped(fail="histogram_quantile"),
        )
    )
    (warning,) = partial.warnings
    assert "query timed out" in warning
    assert warning.endswith("(TTFT, ITL, E2E and queue quantiles unknown)")
    pipeline = FleetPipeline(HealthSettings())
    PastFold(pipeline, list(partial)).run()
    assert pipeline.fleet is not None
    (replica,) = pipeline.fleet.replicas
    assert replica.stats.running is not None  # kept
    assert replica.stats.ttft_p95_s is None  # unknown, never 0
    slow = asyncio.run(
        prometheus_history(
            stack.prometheus,
            60.0,
            until=stack.opened,
            selector='{job="vllm"}',
            timeout_s=2.5,
            fetch=_wrapped(slow="label_replace"),  # the info query,
        )
    )
    assert len(slow) >= 55
    (warning,) = slow.warnings
    assert "within 2.5 s" in warning
    assert "models, KV sizes and finished reasons unknown" in warning


def test_no_prometheus_is_one_line(stack: Stack) -> None:
    with pytest.raises(TargetError, match=r"^cannot connect to http://127\.0\.0\.1:\d+/api"):
        asyncio.run(prometheus_history(f"http://127.0.0.1:{free_port()}", 600.0))
    with pytest.raises(TargetError, match=r"did not answer with JSON .*not a Prometheus API"):
        asyncio.run(prometheus_history(stack.prometheus + "/graph?x=", 600.0))
    with pytest.raises(TargetError, match=r"no vLLM series in the last 10m matching"):
        asyncio.run(prometheus_history(stack.prometheus, 600.0, selector='{job="none"}'))
