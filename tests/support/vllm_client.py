"""Helpers for the real-vLLM tests, independent of llmtop's own code so they can check it.

- `Metrics`: one raw /metrics text read with prometheus_client's parser, summed over engines;
- `quantile`: PromQL's histogram_quantile, written again here as the oracle for llmtop's;
- `TeeTransport`: an httpx transport that keeps every /metrics body llmtop's collector reads, so
  the test can recompute what llmtop derived from exactly the same bytes;
- `burst`: N concurrent streamed completions with unique token-id prompts (no prefix sharing),
  each timed on the client, with the gateway's x-llmtop-queue-ms when present. Bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmtop.core.derive.percentiles import percentile_nearest_rank

MODEL = "tinyllm"
VOCAB = (1000, 30000)
"""Prompt token ids: the same range `llmtop load` draws from (the tiny model has 32,000)."""


class Metrics:
    """One scrape of vLLM's /metrics: samples summed over the `engine` label."""

    def __init__(self, text: str, t: float | None = None) -> None:
        self.text = text
        self.time = time.time() if t is None else t
        self.types: dict[str, str] = {}
        self.labels: dict[str, set[str]] = defaultdict(set)
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for fam in text_string_to_metric_families(text):
            self.types[fam.name] = fam.type
            for s in fam.samples:
                self.samples.append((s.name, dict(s.labels), float(s.value)))
                self.labels[fam.name].update(k for k in s.labels if k != "le")

    def value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples named `name` whose labels include `labels`; None when absent."""
        found = [
            v
            for n, lab, v in self.samples
            if n == name and all(lab.get(k) == want for k, want in labels.items())
        ]
        return sum(found) if found else None

    def need(self, name: str, **labels: str) -> float:
        """Like `value`, but the series must be there."""
        v = self.value(name, **labels)
        assert v is not None, f"{name}{labels or ''} missing from /metrics"
        return v

    def buckets(self, family: str) -> dict[float, float]:
        """Cumulative bucket counts by upper bound, summed over engines."""
        out: dict[float, float] = defaultdict(float)
        for n, lab, v in self.samples:
            if n == family + "_bucket":
                out[float(lab["le"])] += v
        return dict(out)

    def cache_config(self) -> dict[str, str]:
        """The labels of vllm:cache_config_info (block size, block count, ...)."""
        for n, lab, _ in self.samples:
            if n == "vllm:cache_config_info":
                return lab
        raise AssertionError("vllm:cache_config_info missing from /metrics")


def scrape(url: str, timeout_s: float = 10.0) -> Metrics:
    """GET {url}/metrics now."""
    t = time.time()
    r = httpx.get(url.rstrip("/") + "/metrics", timeout=timeout_s)
    r.raise_for_status()
    return Metrics(r.text, t)


def rate(before: Metrics, after: Metrics, name: str, **labels: str) -> float:
    """Per-second increase of a counter between two scrapes."""
    return (after.need(name, **labels) - before.need(name, **labels)) / (after.time - before.time)


def bucket_deltas(before: Metrics, after: Metrics, family: str) -> list[tuple[float, float]]:
    """Cumulative bucket increments between two scrapes, sorted by bound."""
    b0, b1 = before.buckets(family), after.buckets(family)
    return sorted((le, b1[le] - b0.get(le, 0.0)) for le in b1)


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """histogram_quantile as PromQL defines it: linear inside the bucket that holds the rank."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le  # the largest finite bound
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return None


def wait_idle(url: str, timeout_s: float = 180.0) -> Metrics:
    """Wait until vLLM runs and queues nothing (a previous burst drained); the last scrape."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = scrape(url)
        if not m.value("vllm:num_requests_running") and not m.value("vllm:num_requests_waiting"):
            return m
        assert time.monotonic() < deadline, f"vLLM at {url} still busy after {timeout_s:.0f}s"
        time.sleep(0.5)


class TeeTransport(httpx.AsyncBaseTransport):
    """Forwards to a real transport and keeps (time, body) of every /metrics answer."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.metrics: list[tuple[str, str]] = []
        """(url, text) of each /metrics body returned, in order."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self._inner.handle_async_request(request)
        if not request.url.path.endswith("/metrics"):
            return resp
        body = b""
        async for chunk in resp.stream:  # type: ignore[union-attr]
            body += chunk
        await resp.aclose()
        self.metrics.append((str(request.url), body.decode("utf-8", "replace")))
        return httpx.Response(resp.status_code, headers=resp.headers, content=body)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Result:
    """One streamed request as the client saw it."""

    status: int | None = None
    ttft_s: float | None = None
    """Send to first token, on the client (includes any gateway queueing)."""
    queue_s: float | None = None
    """The gateway's x-llmtop-queue-ms, in seconds (None when sent straight to vLLM)."""
    e2e_s: float | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    chunks: list[str] = field(default_factory=list)

    @property
    def engine_ttft_s(self) -> float | None:
        """TTFT once admitted: the client's TTFT less the time queued in the gateway."""
        if self.ttft_s is None:
            return None
        return self.ttft_s - (self.queue_s or 0.0)


def completion_body(prompt_tokens: int, output_tokens: int, rng: random.Random) -> dict[str, Any]:
    """A streamed /v1/completions body with a unique prompt of `prompt_tokens` token ids."""
    return {
        "model": MODEL,
        "prompt": [rng.randrange(*VOCAB) for _ in range(prompt_tokens)],
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_one(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], *, keep_chunks: bool = False
) -> Result:
    """Send one streamed request and time it; never raises for an HTTP problem."""
    res = Result()
    t0 = time.monotonic()
    try:
        async with client.stream("POST", path, json=body) as resp:
            res.status = resp.status_code
            q = resp.headers.get("x-llmtop-queue-ms")
            res.queue_s = float(q) / 1000.0 if q is not None else None
            if resp.status_code != 200:
                res.error = (await resp.aread()).decode("utf-8", "replace")[:200]
                return res
            async for line in resp.aiter_lines():
                if keep_chunks:
                    res.chunks.append(line)
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                for choice in obj.get("choices") or ():
                    text = choice.get("text") or (choice.get("delta") or {}).get("content")
                    if text and res.ttft_s is None:
                        res.ttft_s = time.monotonic() - t0
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                if obj.get("usage"):
                    res.output_tokens = obj["usage"]["completion_tokens"]
        res.e2e_s = time.monotonic() - t0
    except httpx.HTTPError as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def burst(
    url: str,
    n: int,
    prompt_tokens: int,
    output_tokens: int,
    *,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> list[Result]:
    """`n` streamed completions sent at once; each bounded, and the whole burst too."""
    rng = random.Random(seed)
    bodies = [completion_body(prompt_tokens, output_tokens, rng) for _ in range(n)]
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(
        base_url=url, limits=limits, timeout=httpx.Timeout(timeout_s, connect=10.0)
    ) as client:
        tasks = [asyncio.ensure_future(stream_one(client, "/v1/completions", b)) for b in bodies]
        try:
            return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout_s))
        finally:
            for t in tasks:
                t.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*tasks, return_exceptions=True)


def p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank) of client-side figures."""
    got = percentile_nearest_rank(values, 95)
    assert got is not None, "no values"
    return got


def median(values: list[float]) -> float:
    """The median of client-side figures."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
