"""The raw inputs of one poll, before any derivation: what recordings store and replay re-runs.

A `RawPoll` holds the scraped samples llmtop reads (already filtered to the families it uses),
the gateway's admin JSON, the GPU readings and the limit changes seen. Feeding the same RawPolls
to a fresh `Pipeline` gives the same Snapshots, so an improved health rule can be re-run over an
old incident. Everything here is JSON-serialisable through `to_dict`/`from_dict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from llmtop.core.snapshot import GpuStats

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One exposition sample, keyed by its sample name (``_total``, ``_bucket`` kept)."""

    name: str
    labels: Labels
    value: float


_new = object.__new__


def new_sample(name: str, labels: Labels, value: float) -> Sample:
    """`Sample(name, labels, value)` at half the cost: the frozen dataclass's __init__ sets
    each field through object.__setattr__, and a parse makes ~150 a scrape, a hundred
    replicas a second. Equal to the constructor's in every way (tests/unit/test_promtext.py)."""
    s = _new(Sample)
    d = s.__dict__
    d["name"] = name
    d["labels"] = labels
    d["value"] = value
    return s


@dataclass(frozen=True)
class RawEngine:
    """One scrape of one engine's /metrics (samples None when the scrape failed)."""

    url: str
    samples: tuple[Sample, ...] | None
    error: str | None = None
    version: str | None = None
    model: str | None = None


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
                }
                for e in self.engines
            ],
            "gateway_url": self.gateway_url,
            "gateway": self.gateway,
            "gateway_error": self.gateway_error,
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "gpu_error": self.gpu_error,
            "events": list(self.events),
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
        return cls(
            time=float(d["time"]),
            engines=engines,
            gateway_url=d.get("gateway_url"),
            gateway=d.get("gateway"),
            gateway_error=d.get("gateway_error"),
            gpus=gpus,
            gpu_error=d.get("gpu_error"),
            events=tuple(d.get("events", ())),
        )
