"""Which dialect a scrape speaks, and the scrape read through it. Pure. Detected from the
families the exposition carries (`--engine-kind` forces one); a scrape mixing two engines' families
is read as the first in `DIALECTS` and says so; one with none llmtop reads says that instead."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from llmtop.core.base.raw import Sample
from llmtop.core.dialects.dialect import Dialect
from llmtop.core.dialects.engines import BY_KIND, DIALECTS, VLLM
from llmtop.core.vllm import names as vllm_names
from llmtop.core.vllm import reader
from llmtop.core.vllm.scrape import EngineScrape
from llmtop.errors import UsageError

KINDS = tuple(d.kind for d in DIALECTS)
__all__ = [
    "BY_KIND", "DIALECTS", "KINDS", "Detected", "described", "detect", "dialect_of", "extract",
    "lacking", "metrics_path", "sample_names",
]  # fmt: skip


@dataclass(frozen=True)
class Detected:
    """The dialect a scrape is read in (None: it exports no family llmtop reads) and, when the
    exposition is not plainly one engine's, what is odd about it in a user's words."""

    dialect: Dialect | None
    note: str | None = None


_DETECTED: dict[tuple[str | None, tuple[str, ...]], Detected] = {}
"""(Forced kind, sample names seen) -> their reading (an engine exports the same names poll
after poll)."""
_DETECTED_MAX = 256


def metrics_path(kind: str | None, body: str = "") -> str | None:
    """Where to read an engine's Prometheus text instead of /metrics, or None: its dialect's
    own path when forced (`--engine-kind trtllm`), or trtllm-serve's when /metrics answered
    with JSON (`body`: its iteration stats)."""
    if kind is not None:
        path = dialect_of(kind).metrics_path
        return None if path == "/metrics" else path
    return BY_KIND["trtllm"].metrics_path if body.lstrip()[:1] in ("[", "{") else None


def dialect_of(kind: str) -> Dialect:
    """`--engine-kind`'s word as its dialect, or a one-line error naming the choices."""
    try:
        return BY_KIND[kind]
    except KeyError:
        raise UsageError(f"unknown engine kind {kind!r}: one of {', '.join(KINDS)}") from None


def detect(names: Iterable[str], kind: str | None = None) -> Detected:
    """The dialect of a scrape whose samples have these names."""
    key = (kind, tuple(names))
    found = _DETECTED.get(key)
    if found is None:
        found = _detect(key[1], kind)
        if len(_DETECTED) >= _DETECTED_MAX:
            _DETECTED.clear()
        _DETECTED[key] = found
    return found


def _detect(names: tuple[str, ...], kind: str | None) -> Detected:
    present = [d for d in DIALECTS if any(_speaks(d, n) for n in names)]
    if kind is not None:
        forced = dialect_of(kind)
        if forced not in present:
            seen = f" (it exports {_listed(present)})" if present else ""
            return Detected(forced, f"forced to read {forced.title}, whose families it lacks{seen}")
        return Detected(forced)
    if not present:
        return Detected(None)
    if len(present) > 1:
        return Detected(present[0], f"mixes {_listed(present)}: read as {present[0].title}")
    return Detected(present[0])


_OWN = {d.kind: d.names() for d in DIALECTS}


def _speaks(d: Dialect, name: str) -> bool:
    """Whether a sample name is this dialect's: its prefix, or a family it reads by name
    (a Dynamo worker's `dynamo_component_*` beside its frontend's)."""
    return name.startswith(d.prefix) or name in _OWN[d.kind]


def _listed(dialects: list[Dialect]) -> str:
    return " and ".join(f"{d.prefix}*" for d in dialects) + " families"


def extract(
    samples: tuple[Sample, ...], names: list[str] | None = None, kind: str | None = None
) -> EngineScrape:
    """`reader.extract` in the scrape's dialect: vLLM's read as they are, another engine's
    under vLLM's names (`Dialect.translate`), with the engine and any note on the scrape."""
    if names is None:
        names = [s.name for s in samples]
    found = detect(names, kind)
    d = found.dialect
    if d is VLLM and found.note is None:
        return reader.extract(samples, names)
    if d is None:
        return replace(reader.extract(()), engine=None, engine_note=found.note)
    read = samples if d is VLLM else d.translate(samples)
    return replace(reader.extract(read), engine=d.kind, engine_note=found.note)


def sample_names(bucketed: Iterable[str] = ()) -> frozenset[str]:
    """Every sample name llmtop reads from an engine's scrape, in every dialect (the parser's
    keep-list)."""
    out = set(vllm_names.sample_names(bucketed))
    for d in DIALECTS:
        out.update(d.names())
    return frozenset(out)


def described(kind: str | None) -> tuple[str, dict[str, str]]:
    """An engine's title and what it lacks (figure -> why), for what is printed; an engine
    whose dialect was not found is named so and lacks nothing in particular."""
    d = BY_KIND.get(kind or "")
    if d is None:
        return "unknown engine", {}
    return d.title, dict(d.lacks)


def lacking(kind: str | None, figures: tuple[str, ...]) -> str | None:
    """Why an engine of this kind cannot give one of `figures` (the first it lacks), or None
    when it can give them all (vLLM, and an engine whose dialect is unknown: nothing is
    assumed of it, its figures are None where absent)."""
    d = BY_KIND.get(kind or "")
    if d is None or not d.lacks:
        return None
    return next((d.lacks[f] for f in figures if f in d.lacks), None)
