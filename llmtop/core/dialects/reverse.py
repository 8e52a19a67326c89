"""A dialect read backwards for PromQL: vLLM's sample name -> the engine's own series, so one
set of queries and rules (written in vLLM's names) asks Prometheus in each engine's names. Pure.

The same inversion the sim speaks with (`speak.Speaker`): a figure the dialect lacks has no own
name, even where an older build exported one (llama.cpp's KV usage); a family renamed between
versions is asked under every own name it had (`or`, the first listed winning); SGLang's
`tp_rank` is kept to rank 0 or none (each rank exports the same requests); finished requests are
the engine's own counters, each standing for the vLLM reasons it counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.dialects.dialect import PREFIX_QUERIES
from llmtop.core.dialects.engines import BY_KIND, VLLM
from llmtop.core.dialects.speak import COMPLETED, Speaker, figure_of, speaker


@dataclass(frozen=True)
class Reverse:
    """How a dialect's series answer for vLLM's names in a PromQL selector."""

    kind: str
    title: str
    prefix: str
    """Its families' prefix (a `__name__` regex of "any of its series" starts with it)."""
    names: dict[str, tuple[str, ...]]
    """vLLM sample name -> its own sample names, first listed first."""
    summed: dict[str, tuple[str, ...]]
    """vLLM sample name -> its own counters that add up to it (prefix-cache queries: SGLang's
    prompt tokens; llama.cpp's prompt tokens computed and those found cached)."""
    finished: dict[str, str]
    """Its own counters of finished requests -> the vLLM reason each is read as."""
    capacity: tuple[str, str | None] | None
    """(its KV blocks gauge, its tokens-per-block gauge or None: the gauge is in tokens)."""
    keep: str
    """A matcher every selector of its series carries ("" for none)."""
    families: frozenset[str]
    """Every sample name of its own llmtop reads."""

    def speaks(self, name: str) -> bool:
        """Whether a sample name is one of this engine's own."""
        return name.startswith(self.prefix) or name in self.families

    def own(self, name: str) -> tuple[str, ...]:
        """Its own sample names for a vLLM one, each an alternative (none: it lacks it)."""
        return self.names.get(name, ())

    def finished_for(self, reason: str | None) -> tuple[str, ...]:
        """Its counters of requests finished for `reason` (any reason: None)."""
        if reason is None:
            return tuple(self.finished)
        exact = tuple(own for own, r in self.finished.items() if r == reason)
        if exact or reason not in COMPLETED:
            return exact
        return tuple(own for own, r in self.finished.items() if r in COMPLETED)


_REVERSED: dict[str, Reverse] = {}


def reverse(kind: str) -> Reverse:
    """The dialect `kind` read backwards (built once); KeyError for an unknown kind."""
    found = _REVERSED.get(kind)
    if found is None:
        found = _REVERSED[kind] = _build(speaker(BY_KIND[kind]))
    return found


def _build(s: Speaker) -> Reverse:
    d = s.dialect
    names: dict[str, list[str]] = {}
    if d is not VLLM:
        for own, theirs in d.renames.items():
            first = s.names.get(theirs)
            if first is None:  # a figure it lacks (an older build's name of it)
                continue
            for vllm_name, spoken in s.names.items():
                if spoken == first and own not in names.setdefault(vllm_name, []):
                    names[vllm_name].append(own)
    finished = dict(d.finished) if s.by_reason else {}
    summed = {PREFIX_QUERIES: d.queries} if d.queries and "prefix_cache" not in d.lacks else {}
    keep = "" if d.keep_label is None else f'{d.keep_label[0]}=~"{d.keep_label[1]}|"'
    return Reverse(
        kind=d.kind,
        title=d.title,
        prefix=d.prefix,
        names={k: tuple(v) for k, v in names.items()},
        summed=summed,
        finished=finished,
        capacity=s.capacity,
        keep=keep,
        families=d.names(),
    )


def why_lacks(kind: str, names: list[str]) -> str:
    """Why an engine has none of these vLLM series: its dialect's own reason where the
    figure is one it says it lacks, else that the family is vLLM's own."""
    d = BY_KIND[kind]
    for name in names:
        figure = figure_of(name)
        if figure is not None and figure in d.lacks:
            return d.lacks[figure]
    listed = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    return f"{d.title} exports no counterpart of {listed}"
