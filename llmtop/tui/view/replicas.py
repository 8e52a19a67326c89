"""Pure view logic of the replica table and of one replica's full view. No textual, no rich.

The table shows the fleet Snapshot's replicas worst first, sized to the width and height, the
selected one in sight; `replica_snapshot` turns a row into the Snapshot the engine panels read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from llmtop.core.base import format as fmt
from llmtop.core.base.snapshot import Fleet, FleetSnapshot, Replica, Snapshot
from llmtop.core.dialects.engines import BY_KIND

Align = Literal["left", "right"]
Mark = Literal["down", "critical", "degraded", "ok", "unknown"]


@dataclass(frozen=True)
class Column:
    """One column: its heading, fixed width (0 = shares what is left) and alignment."""

    heading: str
    width: int
    align: Align = "right"


COLUMNS: tuple[Column, ...] = (
    Column("replica", 0, "left"),
    Column("model", 0, "left"),
    Column("engine", 0, "left"),
    Column("KV", 4),
    Column("run/wait", 9),
    Column("TTFT95", 6),
    Column("ITL95", 6),
    Column("tok/s", 6),
    Column("worst finding", 0, "left"),
)
NAME, MODEL, ENGINE, FINDING = 0, 1, 2, 8
MARK_WIDTH = 2
"""The status mark and a space before the first column."""
NAME_MAX, MODEL_MAX, ENGINE_MAX, FINDING_MIN = 24, 28, 13, 12
ELLIPSIS = "…"


@dataclass(frozen=True)
class Row:
    """One replica as the table shows it: plain cells, its mark, its worst finding's class."""

    key: str
    depth: int
    """0 for a server, 1 for a data-parallel engine under it."""
    mark: Mark
    cells: tuple[str, ...]
    severity: str | None
    """The worst finding's severity ("critical", "warning"), None when it has none."""


def fleet_of(snapshot: Snapshot | None) -> Fleet | None:
    """The replica rows of a fleet's Snapshot; None for one engine."""
    return snapshot.fleet if isinstance(snapshot, FleetSnapshot) else None


def _mark(r: Replica) -> Mark:
    if not r.stats.up:
        return "down"
    return r.status


def _worst(r: Replica) -> tuple[str, str | None]:
    if not r.stats.up:
        return f"DOWN: {r.stats.error or 'no answer'}", "critical"
    if not r.findings:
        return ("ok" if r.status == "ok" else ""), None
    f = r.findings[0]  # the replica's own findings come critical first
    return f"{f.id}: {f.summary}", f.severity


def _where(r: Replica) -> str:
    """A pod's node and restarts, for the finding cell: `gpu-3, 2 restarts (OOMKilled)`."""
    if r.pod is None:
        return ""
    parts = [r.pod.node] if r.pod.node else []
    if r.pod.restarts:
        why = f" ({r.pod.last_reason})" if r.pod.last_reason else ""
        parts.append(f"{r.pod.restarts} restart{'s' * (r.pod.restarts != 1)}{why}")
    return ", ".join(parts)


def engine_title(r: Replica) -> str:
    """The replica's engine as people name it (vLLM, SGLang, llama.cpp, ...); "?" for one
    whose dialect was not found."""
    kind = r.stats.engine
    return BY_KIND[kind].title if kind in BY_KIND else "?"


def row(r: Replica) -> Row:
    """A replica's cells: name, model, engine, KV %, running/waiting, TTFT p95, ITL p95, tok/s,
    finding (then, for a pod, its node and restarts)."""
    e = r.stats
    finding, severity = _worst(r)
    where = _where(r)
    if where:
        finding = f"{finding} · {where}" if finding else where
    up = e.up
    cells = (
        r.name,
        e.model or "",
        engine_title(r) if up else "",
        fmt.frac(e.kv_cache_usage_frac) if up else "",
        f"{fmt.num(e.running, 0)}/{fmt.num(e.waiting, 0)}" if up else "",
        fmt.dur(e.ttft_p95_s) if up else "",
        fmt.dur(e.itl_p95_s) if up else "",
        fmt.num(e.decode_tok_per_s) if up else "",
        finding,
    )
    return Row(r.key, 0 if r.parent is None else 1, _mark(r), cells, severity)


def widths(replicas: Sequence[Replica], width: int) -> tuple[int, ...]:
    """Each column's width for a table `width` cells wide (after the mark): the numbers keep theirs,
    the name gets up to its longest (at most NAME_MAX), the model what the finding's minimum leaves,
    the finding the rest; narrow, the model goes first, then the name. From the replicas, not their
    rows: the table builds only the rows it shows.
    """
    names = [len(r.name) + (0 if r.parent is None else 2) for r in replicas]
    models = {r.stats.model or "" for r in replicas}
    fixed = sum(c.width for c in COLUMNS) + len(COLUMNS) - 1 + MARK_WIDTH
    flex = max(width - fixed, 0)
    longest_name = max(names, default=7)
    # one model everywhere is the header's: its column would only repeat it
    longest_model = max(map(len, models), default=0) if len(models) > 1 else 0
    # the engine: only in a fleet that is not all vLLM (the header names one engine)
    engines = {engine_title(r) for r in replicas if r.stats.up}
    mixed = engines and engines != {"vLLM"}
    longest_engine = max(len(COLUMNS[ENGINE].heading), *map(len, engines)) if mixed else 0
    name = min(max(longest_name, len(COLUMNS[NAME].heading)), NAME_MAX, max(flex - FINDING_MIN, 8))
    engine = min(longest_engine, ENGINE_MAX, max(flex - name - FINDING_MIN, 0))
    if 0 < engine < len(COLUMNS[ENGINE].heading):
        engine = 0  # a column too narrow for its heading says nothing
    model = min(longest_model, MODEL_MAX, max(flex - name - engine - FINDING_MIN, 0))
    if 0 < model < len(COLUMNS[MODEL].heading):
        model = 0
    # an empty column gives the finding its space and its separator
    finding = max(flex - name - model - engine + (model == 0) + (engine == 0), 0)
    flexed = {NAME: name, MODEL: model, ENGINE: engine, FINDING: finding}
    return tuple(flexed.get(i, c.width) for i, c in enumerate(COLUMNS))


def clip(text: str, width: int, *, keep_end: bool = False) -> str:
    """`text` in at most `width` cells, an ellipsis where it was cut (at the start for names:
    the port or the pod's suffix tells replicas apart)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return ELLIPSIS
    return ELLIPSIS + text[-(width - 1) :] if keep_end else text[: width - 1] + ELLIPSIS


def cell(text: str, width: int, align: Align, *, keep_end: bool = False) -> str:
    """A cell padded to its width."""
    t = clip(text, width, keep_end=keep_end)
    return t.rjust(width) if align == "right" else t.ljust(width)


HINTS = ("↑↓ select, ⏎ opens its panels", "↑↓ ⏎ opens", "⏎ opens")
"""The keys' hint after the last heading, the longest that fits (the footer is full at 80)."""


def heading(cols: Sequence[int]) -> str:
    """The line of column headings (after the mark), with the keys' hint where it fits."""
    room = cols[FINDING] - len(COLUMNS[FINDING].heading) - 2
    hint = next((h for h in HINTS if len(h) <= room), None)
    texts = [c.heading for c in COLUMNS]
    if hint is not None:
        texts[FINDING] += f"  {hint}"
    return " ".join(
        cell(t, w, c.align) for t, c, w in zip(texts, COLUMNS, cols, strict=True) if w > 0
    ).rstrip()


def cells(r: Row, cols: Sequence[int]) -> list[str]:
    """A row's cells padded to `cols` (empty columns left out); a sub-row's name indented."""
    out = []
    for i, (c, w) in enumerate(zip(COLUMNS, cols, strict=True)):
        if w <= 0:
            continue
        text = r.cells[i]
        if i == NAME and r.depth:
            out.append("└ " + cell(text, w - 2, c.align, keep_end=True))
        else:
            out.append(cell(text, w, c.align, keep_end=i == NAME))
    return out


@dataclass(frozen=True)
class Window:
    """Which rows fit: rows[start:stop], and how many are left out above and below."""

    start: int
    stop: int
    above: int
    below: int


def fit(n: int, lines: int, selected: int) -> Window:
    """The rows shown in `lines` lines (the headings take one; a line says what is left out),
    worst first, moved down only as far as keeps the `selected` row in sight. lines <= 0:
    not laid out yet, every row."""
    room = lines - 1
    if lines <= 0 or n <= room:
        return Window(0, n, 0, 0)
    shown = max(room - 1, 1)
    start = 0 if selected < shown else selected - shown + 1
    stop = min(start + shown, n)
    return Window(start, stop, start, n - stop)


def more_line(w: Window) -> str:
    """What the table leaves out, and how to see it."""
    parts = []
    if w.above:
        parts.append(f"{w.above} above")
    if w.below:
        parts.append(f"{w.below} more below")
    return "… " + ", ".join(parts) + " · ↑↓ select, Enter opens"


def title(fleet: Fleet) -> str:
    """The table's title: the fleet totals."""
    t = fleet.totals
    kv = f"KV avg {fmt.frac(t.kv_cache_usage_frac_mean)} max {fmt.frac(t.kv_cache_usage_frac_max)}"
    return (
        f"Replicas {t.up}/{t.replicas} up · run {fmt.num(t.running, 0)} wait "
        f"{fmt.num(t.waiting, 0)} · {kv} · {fmt.num(t.decode_tok_per_s)} tok/s · TTFT95 max "
        f"{fmt.dur(t.ttft_p95_s_max)}"
    )


def index_of(fleet: Fleet, key: str | None) -> int:
    """The row of `key` (the first, the worst, when it is gone or None)."""
    for i, r in enumerate(fleet.replicas):
        if r.key == key:
            return i
    return 0


def find(fleet: Fleet | None, key: str | None) -> Replica | None:
    """The replica `key`, if the fleet has it."""
    if fleet is None:
        return None
    return next((r for r in fleet.replicas if r.key == key), None)


def replica_snapshot(snap: Snapshot, r: Replica) -> Snapshot:
    """What the single-engine panels read for one replica: its figures and findings, the
    gateway and GPUs of the poll."""
    return Snapshot(
        time=snap.time,
        engines=(r.stats,),
        gateway=snap.gateway,
        gpus=snap.gpus,
        gpu_error=snap.gpu_error,
        findings=r.findings,
        status=r.status,
    )


def replica_history(history: Sequence[Snapshot], key: str) -> tuple[Snapshot, ...]:
    """The replica's own Snapshots over the fleet's history (its charts)."""
    out = []
    for snap in history:
        r = find(fleet_of(snap), key)
        if r is not None:
            out.append(replica_snapshot(snap, r))
    return tuple(out)
