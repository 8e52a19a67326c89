"""A dialect spoken: vLLM's samples in one engine's own names, the inverse of
`Dialect.translate`, so the sim (`llmtop sim --dialect`) serves each engine's /metrics from the
very tables llmtop reads them with. Pure.

The inversion: a vLLM name a dialect maps is spoken as the dialect's first own name for it (a
family renamed between versions, SGLang's retractions, is spoken under the name listed first);
vLLM's older name of a figure counts as the figure (LMDeploy maps `gpu_cache_usage_perc`, the sim
writes `kv_cache_usage_perc`). What the dialect does not map, or says it lacks (llama.cpp's
KV usage, mapped under the name its builds before 2025-05 had), is left out. Finished requests
become its own counters (`Dialect.finished`), its KV capacity its own gauges
(`Dialect.capacity`); vLLM's `engine` label goes and the dialect's `keep_label` (SGLang's
`tp_rank="0"`) comes, so `translate(speak(s))` reads as `s` does for every figure it maps.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.base.raw import Labels, Sample
from llmtop.core.dialects.dialect import Dialect
from llmtop.core.vllm import names as vllm

COMPLETED = frozenset({"stop", "length"})
"""vLLM's finished reasons of a request that ran to its end: an engine's one counter of
finished requests counts them all (SGLang's num_requests_total, TGI's request_success)."""
VLLM_ENGINE_LABEL = "engine"
"""vLLM's data-parallel rank label: no other engine's, so it is not spoken."""
REASON = "finished_reason"
_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Spoken:
    """Where one of a dialect's own samples belongs when written out."""

    family: str
    """The name its `# HELP` and `# TYPE` lines carry (a histogram's base, else the sample's)."""
    type: str
    """counter, gauge or histogram: the type of the vLLM family it is spoken from; untyped for
    the sum of one of the engine's histograms that llmtop reads as a counter."""
    source: str
    """That vLLM family, as vLLM's `# HELP` line names it."""


def _figure(key: str) -> str:
    """A key of vLLM's names tables as the figure (`dialect.FIGURES`) a dialect maps or lacks."""
    if key.startswith("prefix_"):
        return "prefix_cache"
    return "spec_decode" if key.startswith("spec_") else key


def _vllm_names() -> dict[str, tuple[str, str, str, str]]:
    """Every vLLM sample name llmtop reads -> (its newest name, its family, its type, the
    figure it is)."""
    out: dict[str, tuple[str, str, str, str]] = {}
    for table, kind in ((vllm.GAUGES, "gauge"), (vllm.COUNTERS, "counter")):
        for key, alternatives in table.items():
            for name in alternatives:
                out[name] = (alternatives[0], alternatives[0], kind, _figure(key))
    for key, alternatives in vllm.HISTOGRAMS.items():
        for fam in alternatives:
            for suffix in _SUFFIXES:
                newest = alternatives[0] + suffix
                out[fam + suffix] = (newest, alternatives[0], "histogram", key)
    out[vllm.FINISHED] = (vllm.FINISHED, vllm.FINISHED, "counter", "finished")
    out[vllm.CACHE_CONFIG] = (vllm.CACHE_CONFIG, vllm.CACHE_CONFIG, "gauge", "kv_capacity")
    return out


_VLLM = _vllm_names()


def figure_of(name: str) -> str | None:
    """The figure (`dialect.FIGURES`) a vLLM sample name llmtop reads is (a histogram's by its
    family's name too), or None for another name."""
    found = _VLLM.get(name) or _VLLM.get(name + "_count")
    return None if found is None else found[3]


class Speaker:
    """One dialect's inversion, built and checked once (`speaker`); `speak` applies it."""

    def __init__(self, dialect: Dialect) -> None:
        """Raises ValueError when the dialect's tables cannot be inverted: a name mapped onto
        one llmtop does not read, a histogram spoken under two families or in part, an own name
        spoken for two figures."""
        self.dialect = dialect
        d = dialect
        first: dict[str, str] = {}  # vLLM's newest sample name -> the dialect's first own name
        for own, theirs in d.renames.items():
            found = _VLLM.get(theirs)
            if found is None:
                raise ValueError(f"{d.kind}: {own} maps to {theirs}, which llmtop does not read")
            if found[3] not in d.lacks:  # an older build's name of a figure it has since lost
                first.setdefault(found[0], own)
        self.families: dict[str, Spoken] = {}
        """Own sample name -> where it is written."""
        for newest, own in first.items():
            _, fam, kind, _ = _VLLM[newest]
            family = own
            if kind == "histogram":
                family = _histogram_family(d.kind, fam, first)
            elif own.endswith(_SUFFIXES):  # a histogram's sum read as a counter (TGI's token
                kind = "untyped"  # sums): written alone, no buckets to make it a histogram
            self._add(own, Spoken(family, kind, fam))
        self.names: dict[str, str] = {
            name: first[newest] for name, (newest, *_) in _VLLM.items() if newest in first
        }
        """vLLM sample name (its older names too) -> the dialect's own."""
        self.by_reason: dict[str, str] = {}
        """Finished reason -> the dialect's own counter of it (empty: none, or it maps vLLM's
        counter by name with its reasons, as TensorRT-LLM does)."""
        if vllm.FINISHED not in self.names and "finished" not in d.lacks:
            for own, reason in d.finished.items():
                if self.by_reason.setdefault(reason, own) == own:
                    self._add(own, Spoken(own, "counter", vllm.FINISHED))
        completed = self.by_reason.get("stop")
        self.reasons: dict[str, tuple[str, ...]] = {
            own: tuple(
                sorted(
                    {r for r, o in self.by_reason.items() if o == own}
                    | (COMPLETED - self.by_reason.keys() if own == completed else set())
                )
            )
            for own in self.by_reason.values()
        }
        """Its own counter of finished requests -> vLLM's finished reasons it counts."""
        self.capacity = None if "kv_capacity" in d.lacks else d.capacity
        for gauge in self.capacity or ():
            if gauge is not None:
                self._add(gauge, Spoken(gauge, "gauge", vllm.CACHE_CONFIG))
        keep = d.keep_label
        self._keep: Labels = () if keep is None else (keep,)
        self.reads: frozenset[str] = frozenset(
            {*self.names, *([vllm.FINISHED] if self.by_reason else ())}
            | ({vllm.CACHE_CONFIG} if self.capacity else set())
        )
        """The vLLM sample names it speaks from (the parser's keep-list)."""
        self.figures = frozenset(_VLLM[n][3] for n in self.reads)
        """The figures (`dialect.FIGURES`) it speaks: what llmtop reads back from it."""

    def _add(self, own: str, spoken: Spoken) -> None:
        if self.families.setdefault(own, spoken) != spoken:
            raise ValueError(f"{self.dialect.kind}: {own} is spoken for two figures")

    def labels(self, labels: Labels, drop: str = VLLM_ENGINE_LABEL) -> Labels:
        """A vLLM sample's labels as the dialect's: vLLM's engine label out, its own in."""
        kept = [(k, v) for k, v in labels if k not in (VLLM_ENGINE_LABEL, drop)]
        keys = {k for k, _ in kept}
        kept += [(k, v) for k, v in self._keep if k not in keys]
        return tuple(sorted(kept))

    def speak(self, samples: tuple[Sample, ...]) -> tuple[Sample, ...]:
        """vLLM's samples in the dialect's own names; a family it does not map is left out."""
        out: list[Sample] = []
        names, by_reason = self.names, self.by_reason
        completed = by_reason.get("stop")
        folded: dict[tuple[str, Labels], float] = {}
        for name, labels, value in samples:
            own = names.get(name)
            if own is not None:
                out.append(Sample(own, self.labels(labels), value))
            elif name == vllm.FINISHED and by_reason:
                reason = vllm.label_value(labels, REASON) or ""
                target = by_reason.get(reason) or (completed if reason in COMPLETED else None)
                if target is not None:
                    key = (target, self.labels(labels, drop=REASON))
                    folded[key] = folded.get(key, 0.0) + value
            elif name == vllm.CACHE_CONFIG and self.capacity is not None:
                out.extend(self._capacity(labels))
        out.extend(Sample(n, ls, v) for (n, ls), v in folded.items())
        return tuple(out)

    def _capacity(self, info: Labels) -> list[Sample]:
        """vLLM's cache_config_info as the dialect's gauges: its blocks and tokens per block,
        or (no per-block gauge) its capacity in tokens."""
        assert self.capacity is not None
        blocks_name, per_block_name = self.capacity
        try:
            size = int(vllm.label_value(info, "block_size") or "")
            blocks = int(vllm.label_value(info, "num_gpu_blocks") or "")
        except ValueError:
            return []
        labels = self.labels(())
        if per_block_name is None:
            return [Sample(blocks_name, labels, float(blocks * size))]
        return [
            Sample(blocks_name, labels, float(blocks)),
            Sample(per_block_name, labels, float(size)),
        ]


def _histogram_family(kind: str, fam: str, first: dict[str, str]) -> str:
    """The one own family a vLLM histogram is spoken as: its three samples under one base."""
    bases = set()
    for suffix in _SUFFIXES:
        own = first.get(fam + suffix)
        if own is None or not own.endswith(suffix):
            raise ValueError(f"{kind}: {fam} is not spoken whole ({fam + suffix} -> {own})")
        bases.add(own.removesuffix(suffix))
    if len(bases) != 1:
        raise ValueError(f"{kind}: {fam} is spoken as {' and '.join(sorted(bases))}")
    return bases.pop()


_SPEAKERS: dict[str, Speaker] = {}


def speaker(dialect: Dialect) -> Speaker:
    """The dialect's `Speaker`, built once per kind."""
    found = _SPEAKERS.get(dialect.kind)
    if found is None or found.dialect is not dialect:
        found = _SPEAKERS[dialect.kind] = Speaker(dialect)
    return found
