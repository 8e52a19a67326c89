"""The sim's /metrics in another engine's dialect (`llmtop sim --dialect`): vLLM's exposition as
the sim renders it, read back, spoken through `core.dialects.speak` (the inverse of the tables
llmtop reads engines with, no second list of names) and written with each family's HELP and
TYPE. Pure.
"""

from __future__ import annotations

from llmtop.core.base.raw import Labels, Sample
from llmtop.core.dialects.dialect import Dialect
from llmtop.core.dialects.speak import speaker
from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import CACHE_CONFIG
from llmtop.sim.exposition import escape, fmt

CAPACITY_HELP = "KV-cache capacity (the sim's cache config, as this engine exports it)."


class SpokenMetrics:
    """Rewrites one sim's vLLM exposition in `dialect`'s names, scrape after scrape."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.speaker = speaker(dialect)
        self._keep = promtext.keep_names(self.speaker.reads)
        self._help: dict[str, str] = {}

    def render(self, vllm_text: str) -> str:
        """The exposition `vllm_text` as the dialect's engine would write it; a family the
        dialect does not map is left out."""
        if not self._help:  # vLLM's HELP lines are the same scrape after scrape
            self._help = _helps(vllm_text)
        families = self.speaker.families
        grouped: dict[str, list[Sample]] = {}
        for s in self.speaker.speak(promtext.parse(vllm_text, self._keep)):
            grouped.setdefault(families[s.name].family, []).append(s)
        out: list[str] = []
        for family, samples in grouped.items():
            spoken = families[samples[0].name]
            help_ = self._help.get(spoken.source, spoken.source)
            if spoken.source == CACHE_CONFIG:
                help_ = CAPACITY_HELP
            elif family in self.speaker.reasons:
                help_ = f"Count of finished requests ({', '.join(self.speaker.reasons[family])})."
            out.append(f"# HELP {family} {help_}")
            out.append(f"# TYPE {family} {spoken.type}")
            out.extend(f"{name}{_labels(labels)} {fmt(value)}" for name, labels, value in samples)
        out.append("")
        return "\n".join(out)


def _helps(text: str) -> dict[str, str]:
    """Family -> its HELP text, from an exposition's `# HELP` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            out.setdefault(name, help_)
    return out


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"
