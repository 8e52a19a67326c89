"""The sim's HTTP server: vLLM's OpenAI API, /metrics and dcgm telemetry over the engine model.

A lifespan task steps the engine on time.monotonic(), one asyncio.Event a stream so hundreds stay
cheap, and runs the steps a late wake-up missed back to back (docs/sim.md); a disconnect aborts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from llmtop.core.dialects.catalog import dialect_of
from llmtop.errors import UsageError
from llmtop.settings import SimSettings
from llmtop.sim.dcgm import DcgmTelemetry
from llmtop.sim.dialects import info, metrics_paths
from llmtop.sim.exposition import restrict
from llmtop.sim.faults import GARBAGE_HEADER_BYTES, SLOW_FACTOR, FaultSchedule, parse_faults
from llmtop.sim.metrics import CONTENT_TYPE, MetricsRenderer
from llmtop.sim.model import Engine, EngineConfig, RequestRejected, Sequence, StepResult
from llmtop.sim.openai import BadRequest, ChunkWriter, error_body, parse_request
from llmtop.sim.profiles import get_profile

log = logging.getLogger(__name__)

MAX_CATCH_UP_S = 5.0
"""The engine clock may trail the wall clock by this much and catch up; a longer gap (the
process was stopped, not starved) passes as idle time."""

MAX_STEPS_PER_WAKE = 1000  # steps run back to back before the handlers get a turn


class _Stream:
    """What a request handler waits on: tokens made visible by the engine loop."""

    __slots__ = ("done", "event", "visible")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.visible = 0
        self.done = False


def build_engine(settings: SimSettings, now: float) -> Engine:
    """The engine the settings describe, or a UsageError saying which setting is wrong."""
    profile = get_profile(settings.profile)
    try:
        config = EngineConfig.from_profile(
            profile,
            kv_tokens=settings.kv_tokens,
            max_num_seqs=settings.max_num_seqs,
            max_model_len=settings.max_model_len,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_num_queued_reqs=settings.max_num_queued_reqs,
        )
        faults = parse_faults(settings.fault) if settings.fault else ()
    except ValueError as e:
        raise UsageError(f"llmtop sim: {e}") from None
    engine = Engine(config, now=now)
    for fault in faults:
        if fault.name == "scheduler-stuck":
            engine.stuck_from_s = now + fault.after_s
    return engine


def fault_schedule(settings: SimSettings, now: float) -> FaultSchedule:
    """The timed faults (slow, garbage) of `--fault`, from `now` (build_engine checked them)."""
    schedule = FaultSchedule()
    for fault in parse_faults(settings.fault) if settings.fault else ():
        if fault.name != "scheduler-stuck":
            schedule.add(fault, now)
    return schedule


def banner(engine: Engine, dialect: str = "vllm") -> str:
    """The line `llmtop sim` prints once listening ({url} is filled in by serve_forever)."""
    cfg = engine.config
    stuck = engine.stuck_from_s
    fault = "" if stuck is None else f", fault scheduler-stuck@{stuck - engine.now:g}"
    speaks = "" if dialect == "vllm" else f", /metrics in {dialect_of(dialect).title}'s names"
    return (
        f"llmtop sim: profile {cfg.profile.name} ({cfg.kv_tokens:,} KV tokens,"
        f" max_num_seqs {cfg.max_num_seqs}{fault}{speaks}) listening on {{url}}"
    )


class SimServer:
    """The engine, its loop against the real clock, and the request handlers."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.model_name = settings.model_name
        self.dialect = dialect_of(settings.dialect)
        now = time.monotonic()
        self.engine = build_engine(settings, now)
        self.faults = fault_schedule(settings, now)
        self.metrics = MetricsRenderer(self.engine, self.model_name, time.time(), self.dialect)
        self.dcgm = DcgmTelemetry(self.engine, time.monotonic())
        self.created = int(time.time())
        # python_* and process_* series, as vLLM's /metrics has them (never the global
        # registry: other servers of the demo share this process).
        self._process_registry = CollectorRegistry(auto_describe=True)
        for collector in (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR):
            self._process_registry.register(collector)
        self._work = asyncio.Event()
        self._closed = False

    # -- the engine loop --------------------------------------------------------------------

    async def run(self) -> None:
        """Step forever: the steps already due back to back, then sleep to the next's end."""
        engine = self.engine
        while True:
            if not engine.has_work():
                self._work.clear()
                await self._work.wait()
            # An idle engine starts at the first arrival (_step), not at this late wake-up.
            engine.advance_to(time.monotonic() - MAX_CATCH_UP_S)
            for _ in range(MAX_STEPS_PER_WAKE):
                result = self._step()
                if engine.now > time.monotonic() or not engine.has_work():
                    break
                self._deliver(result)  # ended already: its tokens are late, send them now
            else:
                await asyncio.sleep(0)
                continue
            delay = engine.now - time.monotonic()  # the step's end (a slow fault's, stretched)
            await asyncio.sleep(delay if delay > 0 else 0)
            self._deliver(result)

    def _step(self) -> StepResult:
        """One engine step at engine.now, of the requests that had arrived by then (a step
        caught up late must not admit one that came later); idle to the next arrival first."""
        engine = self.engine
        waiting = engine.waiting
        later: list[Sequence] = []  # the newest first (waiting is FCFS, newest last)
        while waiting and waiting[-1].arrival_s > engine.now:
            later.append(waiting.pop())
            if not waiting and not engine.running:
                engine.advance_to(later[-1].arrival_s)
                waiting.append(later.pop())
        try:
            start = engine.now
            result = engine.step()
            if self.faults.active("slow", start):  # the step took SLOW_FACTOR times as long
                engine.advance_to(start + (result.end_s - start) * SLOW_FACTOR)
        finally:
            waiting.extend(reversed(later))
        return result

    def _deliver(self, result: StepResult) -> None:
        """Wake the streams that got a token in `result`; mark the finished ones done."""
        for seq in result.emitted:
            stream = seq.waker
            if isinstance(stream, _Stream):
                stream.visible = seq.num_output
                stream.event.set()
        for seq in result.finished:
            stream = seq.waker
            if isinstance(stream, _Stream):
                stream.done = True

    def close(self) -> None:
        """Abort what is left and release every waiting handler (server shutdown)."""
        self._closed = True
        for seq in [*self.engine.running, *self.engine.waiting]:
            self.engine.abort(seq)
            stream = seq.waker
            if isinstance(stream, _Stream):
                stream.done = True
                stream.event.set()

    # -- handlers ---------------------------------------------------------------------------

    def _error(
        self, message: str, kind: str, status: int, param: str | None = None
    ) -> JSONResponse:
        return JSONResponse(error_body(message, kind, status, param), status_code=status)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        if self._closed:
            return self._error("The server is shutting down.", "ServiceUnavailableError", 503)
        if self.faults.active("garbage", time.monotonic()):
            return Response(
                b"\x00\xffnot json\r\n\r\n",
                headers={"x-garbage": "g" * GARBAGE_HEADER_BYTES},
                media_type="application/octet-stream",
            )
        try:
            body = await request.body()
        except ClientDisconnect:  # the client hung up before sending its whole request
            return Response(status_code=499)
        try:
            parsed = parse_request(body, chat=chat, served_model=self.model_name)
            seq = self.engine.add_request(
                parsed.prompt_tokens, parsed.max_tokens, arrival_s=time.monotonic()
            )
        except BadRequest as e:
            return self._error(e.message, e.kind, e.status, e.param)
        except RequestRejected as e:
            return self._error(e.message, e.kind, e.status)
        stream = _Stream()
        seq.waker = stream
        self._work.set()
        writer = ChunkWriter(parsed, int(time.time()))
        if parsed.stream:
            return StreamingResponse(self._sse(seq, stream, writer), media_type="text/event-stream")
        return await self._whole(request, seq, stream, writer)

    async def _sse(self, seq: Sequence, stream: _Stream, writer: ChunkWriter) -> AsyncIterator[str]:
        sent = 0
        try:
            while True:
                await stream.event.wait()
                stream.event.clear()
                visible = stream.visible
                if visible > sent:
                    last = visible - 1 if stream.done else -1
                    yield "".join(
                        writer.token(i, seq.finish_reason if i == last else None)
                        for i in range(sent, visible)
                    )
                    sent = visible
                if stream.done:
                    if writer.req.include_usage:
                        yield writer.usage(sent)
                    yield "data: [DONE]\n\n"
                    return
        finally:
            if not stream.done:
                self.engine.abort(seq)

    async def _whole(
        self, request: Request, seq: Sequence, stream: _Stream, writer: ChunkWriter
    ) -> Response:
        async def finished() -> None:
            while not stream.done:
                await stream.event.wait()
                stream.event.clear()

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        done_task = asyncio.ensure_future(finished())
        gone_task = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({done_task, gone_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone_task.cancel()
            done_task.cancel()
        if not stream.done:
            self.engine.abort(seq)
            return Response(status_code=499)
        return JSONResponse(writer.full(stream.visible, seq.finish_reason or "length"))

    async def fault(self, request: Request) -> Response:
        """POST /sim/fault {"fault": "NAME[@SECONDS][+FOR]"}: a timed fault from now (400
        naming what is wrong); scheduler-stuck only at start (--fault)."""
        try:
            doc = json.loads(await request.body())
            text = doc["fault"] if isinstance(doc, dict) else None
            if not isinstance(text, str):
                raise ValueError('expected {"fault": "NAME[@SECONDS][+FOR]"}')
            faults = parse_faults(text)
            if any(f.name == "scheduler-stuck" for f in faults):
                raise ValueError("scheduler-stuck is set at start only (--fault)")
        except (ValueError, KeyError, ClientDisconnect) as e:
            message = str(e) if isinstance(e, ValueError) else 'expected {"fault": "..."}'
            return self._error(message, "BadRequestError", 400)
        now = time.monotonic()
        for f in faults:
            self.faults.add(f, now)
        return JSONResponse({"faults": [list(w) for w in self.faults.windows], "now": now})

    async def models(self, request: Request) -> Response:
        created = self.created
        card: dict[str, Any] = {
            "id": self.model_name,
            "object": "model",
            "created": created,
            "owned_by": self.dialect.kind,
            "root": f"llmtop-sim/{self.engine.config.profile.name}",
            "parent": None,
            "max_model_len": self.engine.config.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-llmtop-sim-{created}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def info(self, request: Request) -> Response:
        """The dialect's info endpoint (vLLM's /version, SGLang's /get_server_info, ...)."""
        return JSONResponse(info(self.dialect, self.engine.config, self.model_name))

    async def prometheus(self, request: Request) -> Response:
        text = generate_latest(self._process_registry).decode() + self.metrics.render()
        return Response(text, media_type=CONTENT_TYPE)

    async def prometheus_mount(self, request: Request) -> Response:
        """/metrics/, as vLLM's prometheus_client mount answers it: `?name[]=` honoured (its
        plain /metrics ignores the query)."""
        text = generate_latest(self._process_registry).decode() + self.metrics.render()
        names = request.query_params.getlist("name[]")
        return Response(restrict(text, set(names)) if names else text, media_type=CONTENT_TYPE)

    async def dcgm_metrics(self, request: Request) -> Response:
        return Response(self.dcgm.render(time.monotonic()), media_type=CONTENT_TYPE)


def create_app(settings: SimSettings) -> Starlette:
    """The sim as an ASGI app; its lifespan owns the engine loop. app.state.engine is the engine."""
    sim = SimServer(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(sim.run(), name="llmtop-sim-engine")
        task.add_done_callback(_report_crash)
        try:
            yield
        finally:
            sim.close()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = Starlette(
        routes=[
            Route("/v1/completions", sim.completions, methods=["POST"]),
            Route("/v1/chat/completions", sim.chat_completions, methods=["POST"]),
            Route("/v1/models", sim.models, methods=["GET"]),
            Route("/health", sim.health, methods=["GET"]),
            Route("/ping", sim.health, methods=["GET", "POST"]),
            Route(sim.dialect.info_path, sim.info, methods=["GET"]),
            *(Route(path, sim.prometheus, methods=["GET"]) for path in metrics_paths(sim.dialect)),
            Route("/metrics/", sim.prometheus_mount, methods=["GET"]),
            Route("/dcgm/metrics", sim.dcgm_metrics, methods=["GET"]),
            Route("/sim/fault", sim.fault, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.sim = sim
    app.state.engine = sim.engine
    return app


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("llmtop sim: the engine loop stopped", exc_info=task.exception())


def run_sim(settings: SimSettings) -> None:
    """Serve the sim in the foreground until Ctrl-C (`llmtop sim`); ServeError for a busy port."""
    from llmtop.asgi.uvicorn_runner import serve_forever

    app = create_app(settings)
    serve_forever(
        app, settings.host, settings.port, banner=banner(app.state.engine, settings.dialect)
    )
