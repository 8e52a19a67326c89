"""A recorded run lengthened in virtual time, and served as a history: what the console's past
is tested and measured on (tests/support/past_story.py, bench/bench_past.py).

`lengthen` plays a steady stretch of polls again and again, each time later by its length and
with every counter (`_total`, `_count`, `_sum`, `_bucket`) moved on by what it gained over that
stretch, so rates, windows and quantiles go on as measured; gauges repeat. `history_bytes` is
the polls as a gateway's GET /admin/history answers them (gzip, the recording format), served by
`history_app`; `openmetrics` is them as OpenMetrics text for `promtool tsdb
create-blocks-from openmetrics` (a Prometheus holding the same run).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmtop.core.base.raw import RawPoll, Sample
from llmtop.core.record.encode import Encoder, header

_COUNTER = ("_total", "_count", "_sum", "_bucket")


def _moved(raw: RawPoll, dt: float, gains: dict[tuple[str, int], float], k: int) -> RawPoll:
    engines = []
    for e in raw.engines:
        if e.samples is None:
            engines.append(e)
            continue
        samples = tuple(
            Sample(s.name, s.labels, s.value + k * gains.get((e.url, i), 0.0))
            for i, s in enumerate(e.samples)
        )
        engines.append(dataclasses.replace(e, samples=samples))
    gateway = None if raw.gateway is None else {**raw.gateway, "time": raw.gateway["time"] + dt}
    return dataclasses.replace(
        raw, time=raw.time + dt, engines=tuple(engines), gateway=gateway, events=()
    )


def lengthen(polls: Sequence[RawPoll], loop: tuple[int, int], until: float) -> tuple[RawPoll, ...]:
    """`polls` up to `loop[1]`, then polls `loop[0]..loop[1]-1` again until the time `until`
    (poll `loop[1]` gives the stretch's length and its counters' gains)."""
    base = list(polls[: loop[1]])
    a, b = polls[loop[0]], polls[loop[1]]
    period = b.time - a.time
    gains: dict[tuple[str, int], float] = {}
    for ea, eb in zip(a.engines, b.engines, strict=True):
        for i, (sa, sb) in enumerate(zip(ea.samples or (), eb.samples or (), strict=True)):
            if sa.name.endswith(_COUNTER):
                gains[(ea.url, i)] = sb.value - sa.value
    out = list(base)
    k = 1
    while out[-1].time < until:
        out += [_moved(r, k * period, gains, k) for r in base[loop[0] : loop[1]]]
        k += 1
    return tuple(r for r in out if r.time <= until)


def history_bytes(past: Sequence[RawPoll], targets: Mapping[str, Any]) -> bytes:
    """`past` as a gateway's GET /admin/history answers it: a gzip recording."""
    encoder = Encoder()
    lines = [header(1.0, targets, past[0].time), *(encoder.encode(r) for r in past)]
    text = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines)
    return gzip.compress(text.encode())


def history_app(
    past: Sequence[RawPoll],
    targets: Mapping[str, Any],
    token: str | None = None,
    sinces: Sequence[float] = (660.0, 3600.0),
) -> Starlette:
    """A stand-in gateway answering GET /admin/history?since=S with `past`'s last S seconds
    (counted back from its last poll, as a gateway counts from now), 401 without `token`;
    /off/admin/history answers 503, as a gateway keeping no history. The answers for `sinces`
    (the console's two reads) are made here, so a request costs what a gateway's does."""

    def answer(since: float) -> bytes:
        return history_bytes([p for p in past if p.time >= past[-1].time - since], targets)

    answers = {since: answer(since) for since in sinces}

    async def history(request: Request) -> Response:
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return Response(status_code=401)
        since = float(request.query_params["since"])
        if since not in answers:
            answers[since] = answer(since)
        gz = {"content-encoding": "gzip"}
        return Response(answers[since], media_type="application/x-ndjson", headers=gz)

    async def off(request: Request) -> Response:
        return Response(status_code=503)

    return Starlette(routes=[Route("/admin/history", history), Route("/off/admin/history", off)])


def openmetrics(past: Sequence[RawPoll], instance: str, job: str = "vllm") -> str:
    """`past`'s engine samples (and `up`) as OpenMetrics with timestamps, one family at a
    time, for `promtool tsdb create-blocks-from openmetrics`."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    for raw in past:
        for e in raw.engines:
            up = 0.0 if e.samples is None else 1.0
            series.setdefault(("up", ()), []).append((raw.time, up))
            for s in e.samples or ():
                series.setdefault((s.name, s.labels), []).append((raw.time, s.value))
    lines: list[str] = []
    for name in sorted({n for n, _ in series}):
        lines.append(f"# TYPE {name} unknown")
        for (n, labels), points in series.items():
            if n != name:
                continue
            all_labels = (("instance", instance), ("job", job), *labels)
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in all_labels)
            lines += [f"{name}{{{text}}} {v!r} {t:.3f}" for t, v in points]
    return "\n".join(lines) + "\n# EOF\n"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
