"""Streaming load against an OpenAI-compatible endpoint: the IO half of `llmtop load` and the demo.
A `Runner` owns one aiohttp session and the run's bounds (a request budget, a stop event); the
`drivers` feed it through `admit` and `one`, each request streamed and timed on the client
(`stats` does the arithmetic). At the stop, requests in flight are cut: no run outlives its bounds.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from llmtop.errors import TargetError, TooManyRequests
from llmtop.load.stats import Outcome, RequestResult

VOCAB = (1000, 30000)
"""Token ids drawn for prompts: clear of the special tokens of common vocabularies."""
# Chat prompts are text: three-letter words, each one token for common tokenizers and exactly
# one for the sim's ceil(characters / 4) count (word plus its space).

_WORDS = (
    "cat", "dog", "sun", "car", "red", "big", "hot", "new", "old", "day", "way", "man",
    "boy", "top", "sea", "sky", "air", "box", "cup", "map", "pen", "net", "job", "key",
    "arm", "leg", "eye", "ear", "toe", "fan", "ice",
)  # words as rows of text, not one a line  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """What each request of a stream looks like."""

    prompt_tokens: tuple[int, int] = (512, 512)
    """Prompt length range (inclusive), drawn uniformly per request."""
    output_tokens: int = 128
    chat: bool = False
    priority: str | None = None
    """Sent as x-llmtop-priority (high, normal, low) for the gateway."""


@dataclass
class _Progress:
    """What one request has seen so far; read when it finishes or is cut."""

    offered: float
    status: int | None = None
    first: float | None = None
    last: float | None = None
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    usage_prompt: int | None = None
    usage_output: int | None = None
    rejections: int = 0
    retry_after_given: int = 0
    retry_after_honoured: int = 0
    reject_reason: str | None = None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from inference servers; treated as absent


def _reject_reason(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    err = data.get("error")
    for holder in (data, err if isinstance(err, dict) else {}):
        for key in ("reason", "type", "code"):
            if isinstance(holder.get(key), str):
                return str(holder[key])
    return None


class Runner:
    """One load run: the client, the bounds, the results; drivers call `admit` and `one`."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        max_requests: int = 100,
        max_connections: int = 100,
        retry_429: bool = False,
        max_retries: int = 5,
        seed: int = 0,
        request_timeout_s: float = 600.0,
        keep_results: bool = True,
        on_result: Callable[[RequestResult], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.max_requests = max_requests
        self.retry_429 = retry_429
        self.max_retries = max_retries
        self.results: list[RequestResult] = []
        """Every request's result, in completion order (empty unless keep_results)."""
        self.keep_results = keep_results
        self.issued = 0
        self.in_flight = 0
        self.stopped = asyncio.Event()
        self._rng = random.Random(seed)
        self._on_result = on_result
        self._clock = clock
        self.started = clock()
        self._max_connections = max_connections
        # any silence over request_timeout_s fails a request; the run's own bounds cut the rest
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=5.0, sock_read=request_timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        """The session, opened on first use (it belongs to the event loop that first uses it).
        aiohttp, not httpx: half the CPU per streamed token (BENCHMARKS §2), and a load generator
        that saturates its own core measures itself."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.stop()
        if self._session is not None:
            await self._session.close()

    def stop(self) -> None:
        """Stop offering requests and cut the ones in flight."""
        self.stopped.set()

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return self._clock() - self.started

    def mark_start(self) -> None:
        """Start the run's clock now (after the reachability check, say)."""
        self.started = self._clock()

    async def resolve_model(self) -> str:
        """The model to ask for: the one given, else the first of /v1/models; checks the URL."""
        try:
            async with self._http().get(
                self.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=10.0)
            ) as resp:
                status, payload = resp.status, await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            raise TargetError(f"cannot reach {self.url}: {_describe(e)}", target=self.url) from None
        if status != 200:
            raise TargetError(f"{self.url}/v1/models answered HTTP {status}", target=self.url)
        if self.model is None:
            try:
                self.model = str(json.loads(payload)["data"][0]["id"])
            except (ValueError, KeyError, IndexError, TypeError):
                raise TargetError(f"{self.url}/v1/models lists no model", target=self.url) from None
        return self.model

    def admit(self) -> bool:
        """Take one request from the budget; False once stopped or spent."""
        if self.stopped.is_set() or self.issued >= self.max_requests:
            return False
        self.issued += 1
        return True

    async def one(self, shape: Shape) -> RequestResult:
        """Send one admitted request, cutting it if the run stops first; record its result."""
        lo, hi = shape.prompt_tokens
        n_prompt = self._rng.randint(lo, hi)
        body = self._body(shape, n_prompt)
        prog = _Progress(offered=self._clock())
        self.in_flight += 1
        work = asyncio.ensure_future(self._attempts(shape, body, prog))
        stop = asyncio.ensure_future(self.stopped.wait())
        cancelled = False
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # our caller is going away: cut, record, then obey
            cancelled = True
        stop.cancel()
        if not work.done():
            work.cancel()
        outcome: Outcome
        error: str | None
        try:
            outcome, error = await work
        except asyncio.CancelledError:
            outcome, error = "cut", None
        finally:
            self.in_flight -= 1
        result = self._result(prog, outcome, error, n_prompt)
        if self.keep_results:
            self.results.append(result)
        if self._on_result is not None:
            self._on_result(result)
        if cancelled:
            raise asyncio.CancelledError
        return result

    def _body(self, shape: Shape, n_prompt: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": shape.output_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if shape.chat:
            words = " ".join(self._rng.choice(_WORDS) for _ in range(n_prompt))
            body["messages"] = [{"role": "user", "content": words}]
        else:
            body["prompt"] = [self._rng.randrange(*VOCAB) for _ in range(n_prompt)]
        return body

    async def _attempts(
        self, shape: Shape, body: dict[str, Any], prog: _Progress
    ) -> tuple[Outcome, str | None]:
        """Send, and on a 429 wait out Retry-After and resend when asked to; never raises."""
        path = "/v1/chat/completions" if shape.chat else "/v1/completions"
        headers = {"x-llmtop-priority": shape.priority} if shape.priority else {}
        attempt = 0
        while True:
            try:
                return await self._stream(path, body, headers, prog, shape.chat)
            except TooManyRequests as r:
                prog.rejections += 1
                prog.reject_reason = r.reason
                if r.retry_after_s is not None:
                    prog.retry_after_given += 1
                if not self.retry_429 or attempt >= self.max_retries:
                    return "rejected", None
                wait_s = r.retry_after_s if r.retry_after_s is not None else 1.0
                before = self._clock()
                await asyncio.sleep(wait_s)
                if r.retry_after_s is not None and self._clock() - before >= wait_s:
                    prog.retry_after_honoured += 1
                attempt += 1
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                return "error", f"{_kind(e)}: {_describe(e)}"

    async def _stream(
        self, path: str, body: dict[str, Any], headers: dict[str, str], prog: _Progress, chat: bool
    ) -> tuple[Outcome, str | None]:
        async with self._http().post(self.url + path, json=body, headers=headers) as resp:
            prog.status = resp.status
            if resp.status == 429:
                raw = await resp.read()
                raise TooManyRequests(
                    _retry_after(resp.headers.get("retry-after")), _reject_reason(raw)
                )
            if resp.status != 200:
                raw = await resp.read()
                return ("http_error", f"http {resp.status}: {raw[:200].decode(errors='replace')}")
            async for line in resp.content:  # lines, the parse in C; json.loads takes bytes
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return "ok", None
                failed = self._chunk(data, prog, chat)
                if failed:
                    return "error", f"stream: {failed}"
        # A stream that ends without [DONE] still delivered what it delivered.
        return ("ok", None) if prog.chunks else ("error", "stream: ended with no tokens")

    def _chunk(self, data: bytes, prog: _Progress, chat: bool) -> str | None:
        """Account one SSE data payload; returns an error text when the server reported one."""
        now = self._clock()
        try:
            obj = json.loads(data)
        except ValueError:
            return "bad JSON chunk"
        if not isinstance(obj, dict):
            return "bad JSON chunk"
        if "error" in obj:
            err = obj["error"]
            return str(err.get("message", err) if isinstance(err, dict) else err)[:200]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            prog.usage_prompt = usage.get("prompt_tokens")
            prog.usage_output = usage.get("completion_tokens")
        for choice in obj.get("choices") or ():
            text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
            if text:
                if prog.first is None:
                    prog.first = now
                elif prog.last is not None:
                    prog.gaps.append(now - prog.last)
                prog.last = now
                prog.chunks += 1
        return None

    def _result(
        self, prog: _Progress, outcome: Outcome, error: str | None, n_prompt: int
    ) -> RequestResult:
        end = self._clock()
        done = outcome == "ok"
        return RequestResult(
            offered_at_s=prog.offered - self.started,
            outcome=outcome,
            status=prog.status,
            error=error,
            prompt_tokens=prog.usage_prompt if prog.usage_prompt is not None else n_prompt,
            output_tokens=prog.usage_output if prog.usage_output is not None else prog.chunks,
            ttft_s=None if prog.first is None else prog.first - prog.offered,
            itl_s=tuple(prog.gaps),
            e2e_s=(prog.last or end) - prog.offered if done else None,
            elapsed_s=end - prog.offered,
            rejections=prog.rejections,
            retry_after_given=prog.retry_after_given,
            retry_after_honoured=prog.retry_after_honoured,
            reject_reason=prog.reject_reason,
        )


def _kind(e: BaseException) -> str:
    """timeout, connect or protocol: how a request failed, for the error counts."""
    if isinstance(e, asyncio.TimeoutError):
        return "timeout"
    if isinstance(e, aiohttp.ClientConnectorError):
        return "connect"
    protocol = (
        aiohttp.ClientPayloadError,  # cut mid-body
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientOSError,  # reset
        ValueError,  # a line over the reader's limit
    )
    return "protocol" if isinstance(e, protocol) else "connect"


def _describe(e: BaseException) -> str:
    """A short reason a request failed, in words rather than aiohttp's repr."""
    if isinstance(e, aiohttp.ClientConnectorError):
        if isinstance(e.os_error, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect ({e.os_error.strerror or type(e.os_error).__name__})"
    if isinstance(e, aiohttp.InvalidURL):
        return "not a valid URL"
    if isinstance(e, asyncio.TimeoutError):
        return "no answer in time"
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
