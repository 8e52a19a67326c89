"""`--engine-kind` forces the dialect on every reader (the monitor's scrape, a recording of it,
the gateway's autopilot); an unknown kind is one line naming the kinds. trtllm-serve is read at
/prometheus/metrics: forced, or where its /metrics answers with its JSON iteration stats."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from llmtop.cli import main
from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.gateway.server.autopilot_loop import read_scrape
from llmtop.settings import HealthSettings
from llmtop.sources import vllm

ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
TRTLLM = (ENGINES / "trtllm" / "metrics-definitions-050f80de-load.txt").read_text()
LLAMACPP = (ENGINES / "llamacpp" / "metrics-burst.txt").read_text()
ITERATION_STATS = '[{"iter": 7, "gpuMemUsage": 1024, "inflightBatchingStats": {}}]'


Routes = dict[str, tuple[int, str]]
"""Path -> (status, body) an engine answers."""


def serve(routes: Routes, seen: list[str]) -> httpx.AsyncClient:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        status, body = routes.get(request.url.path, (404, "not found"))
        kind = "application/json" if body[:1] in "[{" else "text/plain"
        return httpx.Response(status, text=body, headers={"content-type": kind})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def scrape(
    url: str, routes: dict[str, tuple[int, str]], **kw: object
) -> tuple[RawEngine, list[str]]:
    seen: list[str] = []

    async def go() -> RawEngine:
        async with serve(routes, seen) as client:
            return await vllm.scrape_engine(client, url, timeout_s=2.0, max_bytes=1 << 20, **kw)  # type: ignore[arg-type]

    return asyncio.run(go()), seen


def test_trtllm_serves_its_json_at_metrics_and_is_read_at_prometheus_metrics() -> None:
    url = "http://trtllm-a:8000"
    routes = {
        "/metrics": (200, ITERATION_STATS),
        "/prometheus/metrics": (200, TRTLLM),
        "/version": (200, '{"version": "1.2.0"}'),
    }
    raw, seen = scrape(url, routes)
    assert raw.error is None
    assert (raw.engine, raw.version) == ("trtllm", "1.2.0")
    assert any(s.name == "trtllm_num_requests_waiting" for s in raw.samples or ())
    assert seen[:2] == ["/metrics", "/prometheus/metrics"]
    raw, seen = scrape(url, routes, ask_version=False, engine="trtllm")  # the path kept
    assert seen == ["/prometheus/metrics"]
    assert raw.samples


def test_a_forced_trtllm_is_read_at_its_path_at_once() -> None:
    routes = {"/prometheus/metrics": (200, TRTLLM), "/version": (200, '{"version": "1.2.0"}')}
    raw, seen = scrape("http://trtllm-b:8000", routes, kind="trtllm")
    assert seen[0] == "/prometheus/metrics"
    assert (raw.engine, raw.kind_forced, raw.forced_kind) == ("trtllm", True, "trtllm")
    snap = Pipeline(HealthSettings()).update(RawPoll(1.0, (raw,)))
    assert (snap.engines[0].engine, snap.engines[0].waiting) == ("trtllm", 210.0)


def test_a_forced_kind_reads_in_that_dialect_and_travels_in_a_recording() -> None:
    routes = {"/metrics": (200, LLAMACPP), "/get_server_info": (200, '{"version": "0.5.2"}')}
    raw, _ = scrape("http://llama:8080", routes, kind="sglang")
    assert (raw.engine, raw.kind_forced) == ("sglang", True)
    poll = RawPoll(1.0, (raw,))
    again = RawPoll.from_dict(poll.to_dict())
    assert again.engines[0].forced_kind == "sglang"
    e = Pipeline(HealthSettings()).update(again).engines[0]
    assert e.engine == "sglang"
    assert e.stats_disabled  # llama.cpp's families are no SGLang's
    assert e.engine_note is not None
    assert "forced to read SGLang" in e.engine_note
    unforced = RawPoll(1.0, (RawEngine(raw.url, raw.samples),))
    assert RawPoll.from_dict(unforced.to_dict()).engines[0].forced_kind is None


def test_the_autopilot_reads_in_the_forced_dialect() -> None:
    assert read_scrape(LLAMACPP).engine == "llamacpp"
    forced = read_scrape(TRTLLM, "trtllm")
    assert (forced.engine, forced.gauges["waiting"]) == ("trtllm", 210.0)


@pytest.mark.parametrize("command", ["snapshot", "gateway"])
def test_an_unknown_kind_is_one_line_naming_the_kinds(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([command, "--engine-kind", "vlm", "--engine", "http://127.0.0.1:1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1
    assert "unknown engine kind 'vlm'" in err[0]
    assert "vllm, sglang, trtllm, lmdeploy, llamacpp, tgi, dynamo" in err[0]
