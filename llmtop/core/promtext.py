"""Prometheus exposition text -> the `Sample`s llmtop reads, with errors that name the line.

prometheus_client's parser does the parsing. Before it runs, lines of families llmtop never reads
(python_*, http_*, the `_created` timestamps, ~80 % of a vLLM scrape) are dropped with a cheap
name test; `bench/bench_parse.py` measures what that saves. Dropped lines are still checked with
a loose pattern, so a body that is not exposition text at all (an HTML page, a JSON error) is an
error, not an empty scrape. The parser raises a bare ValueError without a position; on that path
only, the failing line is found by bisection and named in the `ScrapeError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from prometheus_client.parser import text_string_to_metric_families

from llmtop.core.raw import Sample
from llmtop.errors import ScrapeError

_NAME = re.compile(r"[^{\s]+")
_LOOSE_SAMPLE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+[-+0-9.eEnNaAIf]+(?:[ \t]+-?[0-9.]+)?[ \t]*"
)
_MAX_SHOWN = 120

Keep = Callable[[str], bool]
"""Predicate on a sample name (``_total``/``_bucket`` kept) or a family name."""


def keep_names(sample_names: Iterable[str]) -> Keep:
    """A `Keep` for a set of sample names; their family names (`# HELP/TYPE`) match too."""
    names = frozenset(sample_names)
    families = frozenset(_family_of(n) for n in names) | names
    return lambda name: name in names or name in families


def keep_prefix(prefix: str) -> Keep:
    """A `Keep` for every family whose name starts with `prefix` (dcgm-exporter: DCGM_FI_)."""
    return lambda name: name.startswith(prefix)


def _family_of(sample_name: str) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum"):
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def _shown(line: str) -> str:
    return line if len(line) <= _MAX_SHOWN else line[:_MAX_SHOWN] + "..."


def _bad_line(lineno: int, line: str, why: str = "not Prometheus text") -> ScrapeError:
    return ScrapeError(f"{why} at line {lineno}: {_shown(line)!r}", line=lineno)


def parse(text: str, keep: Keep | None = None) -> tuple[Sample, ...]:
    """Parse exposition text; with `keep`, only the families it accepts are parsed and returned.

    Raises ScrapeError naming the first bad line (1-based number and its text, truncated).
    """
    kept: list[str] = []
    numbers: list[int] = []
    for lineno, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and keep is not None:
                if not keep(parts[2]):
                    continue
            elif keep is not None:
                continue  # a plain comment
        elif keep is not None:
            m = _NAME.match(line)
            if m is None or not keep(m.group(0)):
                if _LOOSE_SAMPLE.fullmatch(line) is None:
                    raise _bad_line(lineno, raw_line)
                continue
        kept.append(line)
        numbers.append(lineno)
    try:
        return _samples(kept)
    except ValueError:
        bad = _first_bad(kept)
        raise _bad_line(numbers[bad], kept[bad]) from None


def _samples(lines: list[str]) -> tuple[Sample, ...]:
    out: list[Sample] = []
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            out.append(Sample(s.name, tuple(sorted(s.labels.items())), float(s.value)))
    return tuple(out)


def _first_bad(lines: list[str]) -> int:
    """Index of the first line whose prefix no longer parses (bisection; error path only)."""
    lo, hi = 0, len(lines) - 1  # invariant: lines[:hi+1] fails
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            _samples(lines[: mid + 1])
        except ValueError:
            hi = mid
        else:
            lo = mid + 1
    return lo
