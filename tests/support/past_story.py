"""The demo story (tests/fixtures/demo-story.jsonl.gz, a recorded real run) lengthened in virtual
time so that a console can open 10 minutes after its onset: the steady minute after the cap is
played again and again, each time later by its length and with every counter (`_total`,
`_count`, `_sum`, `_bucket`) moved on by what it gained over that minute, so rates, windows and
quantiles go on as measured; gauges repeat. Also: the polls as a gateway's /admin/history
answer (gzip, the recording format) and as OpenMetrics text for `promtool tsdb
create-blocks-from openmetrics` (a Prometheus holding the same run).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
from collections.abc import Sequence

from llmtop.core.base.raw import RawPoll, Sample
from llmtop.core.record.encode import Encoder, header
from tests.support import story

ONSET = 74
"""The story's poll where the first finding fires (degraded-200: TTFT over the SLO)."""
LOOP = (160, 220)
"""The steady minute after the cap, played again (its polls a..b-1)."""
OPEN_AFTER_ONSET_S = 600.0
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


@functools.cache
def polls(after_onset_s: float = OPEN_AFTER_ONSET_S + 5.0) -> tuple[RawPoll, ...]:
    """The story's polls up to poll `LOOP[1]`, then its steady minute again until
    `after_onset_s` after the onset."""
    rec = story.recording()
    base = [rec.raw(i) for i in range(LOOP[1])]
    a, b = base[LOOP[0]], rec.raw(LOOP[1])
    period = b.time - a.time
    gains: dict[tuple[str, int], float] = {}
    for ea, eb in zip(a.engines, b.engines, strict=True):
        for i, (sa, sb) in enumerate(zip(ea.samples or (), eb.samples or (), strict=True)):
            if sa.name.endswith(_COUNTER):
                gains[(ea.url, i)] = sb.value - sa.value
    out = list(base)
    end = base[ONSET].time + after_onset_s
    k = 1
    while out[-1].time < end:
        out += [_moved(r, k * period, gains, k) for r in base[LOOP[0] : LOOP[1]]]
        k += 1
    return tuple(r for r in out if r.time <= end)


def opened_at() -> int:
    """The index of the first live poll: 10 minutes after the onset."""
    t = polls()[ONSET].time + OPEN_AFTER_ONSET_S
    return next(i for i, r in enumerate(polls()) if r.time >= t)


def history_bytes(past: Sequence[RawPoll]) -> bytes:
    """`past` as a gateway's GET /admin/history answers it: a gzip recording."""
    encoder = Encoder()
    head = header(1.0, story.recording().header.get("targets") or {}, past[0].time)
    lines = [head, *(encoder.encode(r) for r in past)]
    text = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines)
    return gzip.compress(text.encode())


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
