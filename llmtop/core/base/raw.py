"""One poll's raw inputs, before any derivation: what recordings store and replay re-runs. A
`RawPoll` holds the kept samples (through Prometheus, its decoded answers), the gateway's admin
JSON, the GPU readings and the limit changes; fed to a fresh `Pipeline` they give the same
Snapshots, so a better rule re-runs over an old incident. JSON via `to_dict`/`from_dict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from llmtop.core.base.snapshot import GpuStats

Labels = tuple[tuple[str, str], ...]


class Sample(NamedTuple):
    """One exposition sample, keyed by its sample name (``_total``, ``_bucket`` kept).

    A named tuple, not a dataclass: a parse makes ~150 a scrape, a hundred replicas a second,
    and a tuple is made and read in C (unpacking `name, labels, value` reads all three at
    once)."""

    name: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class RawEngine:
    """One scrape of one engine's /metrics (samples None when the scrape failed)."""

    url: str
    samples: tuple[Sample, ...] | None
    error: str | None = None
    version: str | None = None
    model: str | None = None
    engine: str | None = None
    """The engine kind its info endpoint named (`core.dialects`), where its metrics cannot."""
    kind_forced: bool = False
    """`engine` was given (`--engine-kind`): its samples are read in that dialect."""

    @property
    def forced_kind(self) -> str | None:
        """The dialect its samples must be read in; None: the one they speak (detected)."""
        return self.engine if self.kind_forced else None


@dataclass(frozen=True)
class PromRow:
    """What Prometheus answered for one replica (engine "") or one engine of a data-parallel
    replica: its figures by name (None: unknown; names in `core.promql.promql`), finished requests
    per second by reason, and the slow-changing model and KV blocks."""

    replica: str
    engine: str = ""
    figures: dict[str, float | None] = field(default_factory=dict)
    finished_per_s: dict[str, float] = field(default_factory=dict)
    model: str | None = None
    kv_blocks: int | None = None
    kv_block_size: int | None = None


@dataclass(frozen=True)
class PromAnswers:
    """One poll of a Prometheus, decoded: every replica's row, the histograms' first bucket
    bounds (for the first-bucket quantile fix), or why Prometheus could not answer."""

    url: str
    rows: tuple[PromRow, ...] = ()
    first_bounds: dict[str, float] = field(default_factory=dict)
    """Histogram key -> its lowest finite bucket bound, in seconds."""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; a row is [replica, engine, figures, finished, model, blocks, block size]."""
        return {
            "url": self.url,
            "rows": [
                [
                    r.replica,
                    r.engine,
                    r.figures,
                    r.finished_per_s,
                    r.model,
                    r.kv_blocks,
                    r.kv_block_size,
                ]
                for r in self.rows
            ],
            "first_bounds": self.first_bounds,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PromAnswers:
        """Inverse of `to_dict`; raises KeyError/TypeError/ValueError on a malformed dict."""
        rows = tuple(
            PromRow(
                replica=str(replica),
                engine=str(engine),
                figures={str(k): None if v is None else float(v) for k, v in figures.items()},
                finished_per_s={str(k): float(v) for k, v in finished.items()},
                model=None if model is None else str(model),
                kv_blocks=None if blocks is None else int(blocks),
                kv_block_size=None if size is None else int(size),
            )
            for replica, engine, figures, finished, model, blocks, size in d.get("rows", [])
        )
        bounds = {str(k): float(v) for k, v in (d.get("first_bounds") or {}).items()}
        return cls(url=str(d["url"]), rows=rows, first_bounds=bounds, error=d.get("error"))


@dataclass(frozen=True)
class RawPoll:
    """Everything one poll read, at `time` (seconds since the epoch)."""

    time: float
    engines: tuple[RawEngine, ...] = ()
    gateway_url: str | None = None
    gateway: dict[str, Any] | None = None
    """The gateway's /admin/stats JSON (limits included), None when not read."""
    gateway_error: str | None = None
    gpus: tuple[GpuStats, ...] = ()
    gpu_error: str | None = None
    events: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    """Limit changes seen since the previous poll (the gateway's /admin/events entries)."""
    prometheus: PromAnswers | None = None
    """What a `--prometheus` fleet's Prometheus answered (None when not reading one)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; samples become compact [name, {labels}, value] triples."""
        return {
            "time": self.time,
            "engines": [
                {
                    "url": e.url,
                    "samples": None
                    if e.samples is None
                    else [[s.name, dict(s.labels), s.value] for s in e.samples],
                    "error": e.error,
                    "version": e.version,
                    "model": e.model,
                    **({"engine": e.engine} if e.engine is not None else {}),
                    **({"forced": True} if e.kind_forced else {}),
                }
                for e in self.engines
            ],
            "gateway_url": self.gateway_url,
            "gateway": self.gateway,
            "gateway_error": self.gateway_error,
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "gpu_error": self.gpu_error,
            "events": list(self.events),
            "prometheus": None if self.prometheus is None else self.prometheus.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RawPoll:
        """Inverse of `to_dict`; raises KeyError/TypeError/ValueError on a malformed dict."""
        engines = tuple(
            RawEngine(
                url=str(e["url"]),
                samples=None
                if e.get("samples") is None
                else tuple(
                    Sample(
                        str(n), tuple(sorted((str(k), str(v)) for k, v in lab.items())), float(val)
                    )
                    for n, lab, val in e["samples"]
                ),
                error=e.get("error"),
                version=e.get("version"),
                model=e.get("model"),
                engine=e.get("engine"),
                kind_forced=e.get("forced") is True,
            )
            for e in d.get("engines", [])
        )
        gpus = tuple(
            GpuStats(
                **{
                    **g,
                    "throttle_reasons": tuple(g.get("throttle_reasons", ())),
                    "processes": tuple(g.get("processes", ())),
                }
            )
            for g in d.get("gpus", [])
        )
        answers = d.get("prometheus")
        return cls(
            time=float(d["time"]),
            engines=engines,
            gateway_url=d.get("gateway_url"),
            gateway=d.get("gateway"),
            gateway_error=d.get("gateway_error"),
            gpus=gpus,
            gpu_error=d.get("gpu_error"),
            events=tuple(d.get("events", ())),
            prometheus=None if answers is None else PromAnswers.from_dict(answers),
        )
