"""The past of a fleet that Prometheus scrapes: the live Prometheus source's queries
(`core.promql.promql`) evaluated over a range (`/api/v1/query_range`), one `RawPoll` with its
`PromAnswers` a step, as a `Recording` that replay, report and the console's past read unchanged.

A packed answer holds its figures in a label, so over a range each step is a series of its own
with one point: grouping every matrix's points by time gives each step's instant answer, which
`promql_answers.read_rows` decodes as the live source does. Three queries (the slow figures, then
the figures and the quantiles at once); a query that fails or times out is named in the
recording's `warnings` with what it leaves unknown, and the rest is kept; none answering is one
`TargetError` line. Nothing missing is read as healthy: an unknown figure stays None.

When Prometheus also scrapes an llmtop gateway, a fourth query reads its limit gauges
(`llmtop_gateway_limit_<field>`, `_paused`): each step where one moved is a limit change on that
step's poll (`RawPoll.events`, /admin/events' shape), who made it unknown (`source` None). A
Prometheus without them leaves limit changes unknown: one line in `warnings`.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from llmtop.core.base.admin_api import LIMITS, PAUSED
from llmtop.core.base.raw import PromAnswers, PromRow, RawPoll
from llmtop.core.pipeline.past import recording_of
from llmtop.core.pipeline.span import span_text
from llmtop.core.promql import promql, promql_answers
from llmtop.core.record.decode import Recording
from llmtop.core.record.encode import header
from llmtop.errors import LlmtopError, TargetError
from llmtop.sources.http.scrape_client import ScrapeClient
from llmtop.sources.prometheus import Unreachable, ask_api

RangeFetch = Callable[[str, dict[str, str]], Awaitable[tuple[int, bytes]]]
"""POST one range query's form to an endpoint: (HTTP status, body). Injected by tests."""

MAX_POINTS = 3600
"""Steps asked at most (Prometheus refuses more than 11,000 a series): an hour at 1 s; a longer
range gets a coarser step."""
INFO_POINTS = 60
"""Steps of the slow figures (replicas, KV sizes, models, finished reasons) over the range."""
MAX_ANSWER_BYTES = 512 << 20
TIMEOUT_S = 10.0

_WHAT_IS_LOST = {
    "info": "models, KV sizes and finished reasons unknown",
    "figures": "running, waiting, KV use and rates unknown",
    "quantiles": "TTFT, ITL, E2E and queue quantiles unknown",
    "engines": "data-parallel engines' own rows missing",
    "gateway": "limit changes unknown",
}
GATEWAY_METRICS = {
    "llmtop_gateway_limit_"
    + spec.field.removesuffix("_s")
    + ("_seconds" if spec.unit == "s" else ""): spec.field
    for spec in LIMITS
    if spec.kind != "choice"
}
"""The gateway's limit gauges (gateway/server/metrics.py) -> the limit's field; a limit that is
off has no gauge."""
_PAUSED_METRIC = "llmtop_gateway_paused"
_GATEWAY_QUERY = '{__name__=~"' + "|".join(sorted([*GATEWAY_METRICS, _PAUSED_METRIC])) + '"}'
"""Every gateway's limit gauges, whatever the job (the selector names the engines')."""
WHO_UNKNOWN = "who: not in Prometheus"
"""A limit change's `reason` from Prometheus: it holds the values, not who set them."""


def choose_step(since_s: float, step_s: float, max_points: int = MAX_POINTS) -> float:
    """`step_s`, or the coarser whole second that keeps the range within `max_points`."""
    return max(step_s, float(math.ceil(since_s / max(max_points, 1))))


async def prometheus_history(
    url: str,
    since_s: float,
    step_s: float = 1.0,
    *,
    until: float | None = None,
    selector: str | None = None,
    window_s: float = 60.0,
    replica_label: str = "instance",
    timeout_s: float = TIMEOUT_S,
    max_points: int = MAX_POINTS,
    fetch: RangeFetch | None = None,
    clock: Callable[[], float] = time.time,
) -> Recording:
    """The last `since_s` seconds (up to `until`, default now) of every replica Prometheus at
    `url` scrapes, one poll a step (`choose_step`). TargetError (one line) when no query answers
    or nothing is there; a query that failed is a line in `warnings`, what it carries unknown."""
    if since_s <= 0:
        raise LlmtopError(f"--since {since_s:g}: must be more than 0 seconds")
    end = clock() if until is None else until
    start = end - since_s
    step = choose_step(since_s, step_s, max_points)
    queries = promql.Queries(promql.selector_matchers(selector), window_s, replica_label)
    asker = _Asker(url.rstrip("/"), start, end, timeout_s, fetch)
    warnings: list[str] = []

    def lost(name: str, error: str) -> None:
        warnings.append(f"prometheus history: {error} ({_WHAT_IS_LOST[name]})")

    try:
        info_step = max(step, since_s / INFO_POINTS)
        infos: list[tuple[float, promql_answers.Info]] = []
        try:
            info_steps = _by_time(await asker.ask(queries.info(), info_step))
            infos = [(t, promql_answers.read_info(v, replica_label)) for t, v in info_steps.items()]
        except TargetError as e:
            if asker.unreachable:
                raise
            lost("info", str(e))
        reasons = tuple(sorted({r for _, i in infos for r in i.reasons}))
        infos = [(t, replace(i, reasons=reasons)) for t, i in sorted(infos)]
        gateway_task = asyncio.ensure_future(_gateway_changes(asker, step))
        try:
            answered = await _ask_pair(
                asker, queries.replicas(reasons), step, ("figures", "quantiles")
            )
        finally:
            changes, gateway_error = await gateway_task
        for name, error in answered.failed:
            lost(name, error)
        if not answered.ok:
            raise TargetError(f"prometheus {url}: no history: {answered.failed[0][1]}")
        rows = _rows(answered.steps, infos, replica_label)
        if any(promql_answers.data_parallel(r) for r in rows.values()):
            engines = await _ask_pair(asker, queries.engines(reasons), step, ("engines", "engines"))
            for _, error in engines.failed[:1]:
                lost("engines", error)
            for t, extra in _rows(engines.steps, infos, replica_label, by_engine=True).items():
                rows[t] = rows.get(t, []) + extra
    finally:
        await asker.aclose()
    if not rows:
        raise TargetError(
            f"prometheus {url}: no vLLM series in the last {span_text(since_s)}"
            + (f" matching {selector}" if selector else "")
        )
    if gateway_error is not None:
        lost("gateway", gateway_error)
    polls = [
        RawPoll(
            time=t,
            prometheus=PromAnswers(url, tuple(r), _bounds(infos, t)),
            events=tuple(changes.get(t, ())),
        )
        for t, r in sorted(rows.items())
    ]
    if polls[0].time - start > max(step, window_s) * 2:
        got = span_text(polls[-1].time - polls[0].time)
        warnings.append(f"prometheus history: it holds {got} of the {span_text(since_s)} asked")
    targets: dict[str, Any] = {"vllm": [], "prometheus": url, "gateway": None, "dcgm": None}
    return recording_of(polls, f"prometheus {url}", header(step, targets, start), warnings)


class _Asker:
    """Asks range queries of one Prometheus, each bounded by `timeout_s`, errors in words."""

    def __init__(
        self, url: str, start: float, end: float, timeout_s: float, fetch: RangeFetch | None
    ) -> None:
        self.endpoint = url + "/api/v1/query_range"
        self.start, self.end, self.timeout_s = start, end, timeout_s
        self.unreachable = False
        """A connection refused: the other queries would fail the same way."""
        self._fetch = fetch or self._post
        self._http: ScrapeClient | None = None

    async def _post(self, endpoint: str, form: dict[str, str]) -> tuple[int, bytes]:
        if self._http is None:
            self._http = ScrapeClient(timeout_s=self.timeout_s, max_bytes=MAX_ANSWER_BYTES)
        answer = await self._http.post_form(endpoint, form)
        return answer.status, answer.body

    async def ask(self, expr: str, step: float) -> list[dict[str, Any]]:
        """One range query's matrix; TargetError in the user's words."""
        form = {"query": expr, "start": f"{self.start:.3f}", "end": f"{self.end:.3f}"}
        form["step"] = f"{step:g}"
        try:
            return await ask_api(
                self.endpoint, partial(self._fetch, self.endpoint, form), self.timeout_s
            )
        except Unreachable:
            self.unreachable = True
            raise

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


async def _gateway_changes(
    asker: _Asker, step: float
) -> tuple[dict[float, list[dict[str, Any]]], str | None]:
    """The gateway's limit changes by step, or none and why they are unknown."""
    try:
        matrix = await asker.ask(_GATEWAY_QUERY, step)
    except TargetError as e:
        return {}, str(e)
    if not matrix:
        return {}, "no llmtop gateway series (llmtop_gateway_limit_*) in this Prometheus"
    return limit_changes(_by_time(matrix)), None


def _number(point: object) -> float | None:
    try:
        value = float(point[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) else None


def _limit_value(field: str, value: float | None) -> int | float | None:
    """A gauge's value as /admin/limits writes that limit: an int for a count."""
    if value is None:
        return None
    spec = next(s for s in LIMITS if s.field == field)
    return round(value) if spec.kind == "int" else value


def limit_changes(
    steps: Mapping[float, Sequence[Mapping[str, Any]]],
) -> dict[float, list[dict[str, Any]]]:
    """Step time -> the limit changes (and pauses) the gateway gauges show there, as
    /admin/events entries with `source` None (`reason` WHO_UNKNOWN). A gateway is the gauges'
    labels but the name; a step where it has no `_paused` gauge (not scraped, gone) is
    unknown and moves nothing; in one it has, a limit without its gauge is off. The same change
    seen at several gateways (shared limits) is one entry."""
    last: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    out: dict[float, list[dict[str, Any]]] = {}
    for t in sorted(steps):
        now: dict[tuple[tuple[str, str], ...], dict[str, Any]] = defaultdict(dict)
        for item in steps[t]:
            metric = item.get("metric")
            if not isinstance(metric, Mapping):
                continue
            name = metric.get("__name__")
            gateway = tuple(sorted((str(k), str(v)) for k, v in metric.items() if k != "__name__"))
            value = _number(item.get("value"))
            if name == _PAUSED_METRIC and value is not None:
                now[gateway][PAUSED] = value >= 0.5
            elif isinstance(name, str) and name in GATEWAY_METRICS:
                field = GATEWAY_METRICS[name]
                now[gateway][field] = _limit_value(field, value)
        seen: set[tuple[str, str, str]] = set()
        for gateway, state in sorted(now.items()):
            if PAUSED not in state:
                continue
            state = {f: state.get(f) for f in (*GATEWAY_METRICS.values(), PAUSED)}
            before, last[gateway] = last.get(gateway), state
            if before is None:
                continue
            for field, new in state.items():
                old = before[field]
                key = (field, repr(old), repr(new))
                if new == old or key in seen:
                    continue
                seen.add(key)
                event = {"time": t, "field": field, "old": old, "new": new, "source": None}
                out.setdefault(t, []).append({**event, "reason": WHO_UNKNOWN})
    return out


class _Pair:
    """A packed pair's answers by step, and the queries that failed (name, error)."""

    def __init__(self) -> None:
        self.steps: dict[float, list[promql_answers.Answer]] = defaultdict(list)
        self.failed: list[tuple[str, str]] = []
        self.ok = False


async def _ask_pair(
    asker: _Asker, pair: tuple[promql.Packed, promql.Packed], step: float, names: tuple[str, str]
) -> _Pair:
    """Both packed queries at once; each step's answers, whatever failed named."""
    out = _Pair()
    results = await asyncio.gather(*(asker.ask(q.expr, step) for q in pair), return_exceptions=True)
    for name, packed, result in zip(names, pair, results, strict=True):
        if isinstance(result, TargetError):
            out.failed.append((name, str(result)))
            continue
        if isinstance(result, BaseException):
            raise result
        out.ok = True
        for t, vector in _by_time(result).items():
            out.steps[t].append((packed.names, vector))
    return out


def _by_time(matrix: Sequence[Mapping[str, Any]]) -> dict[float, list[dict[str, Any]]]:
    """A range answer's points grouped by step: each step's instant vector."""
    out: dict[float, list[dict[str, Any]]] = defaultdict(list)
    for series in matrix:
        metric, values = series.get("metric"), series.get("values")
        if not isinstance(metric, dict) or not isinstance(values, list):
            continue
        for point in values:
            try:
                t = round(float(point[0]), 3)
            except (TypeError, ValueError, IndexError):
                continue
            out[t].append({"metric": metric, "value": point})
    return out


def _info_at(infos: Sequence[tuple[float, promql_answers.Info]], t: float) -> promql_answers.Info:
    """The slow figures as last read at or before `t` (the first reading before it)."""
    if not infos:
        return promql_answers.Info()
    i = bisect.bisect_right([x for x, _ in infos], t) - 1
    return infos[max(i, 0)][1]


def _bounds(infos: Sequence[tuple[float, promql_answers.Info]], t: float) -> dict[str, float]:
    return dict(_info_at(infos, t).first_bounds)


def _rows(
    steps: Mapping[float, list[promql_answers.Answer]],
    infos: Sequence[tuple[float, promql_answers.Info]],
    replica_label: str,
    *,
    by_engine: bool = False,
) -> dict[float, list[PromRow]]:
    """Each step's rows, decoded as the live source decodes an instant answer."""
    out: dict[float, list[PromRow]] = {}
    for t, answers in steps.items():
        rows = promql_answers.read_rows(
            answers, _info_at(infos, t), replica_label, by_engine=by_engine
        )
        if rows:
            out[t] = rows
    return out
