"""Prometheus exposition text -> the `Sample`s llmtop reads, with errors that name the line.

Two paths, the same answer. The fast path (a `keep_names` filter, the text in the plain shape
every exporter writes) never splits lines: one regex pass checks the whole text's shape (the
same loose check of skipped lines as below), a second finds the kept families' lines by a trie
of their names, and label sets are memoised, since they repeat every scrape. Anything unusual
(escapes, timestamps, CRs, odd TYPE lines) falls back to the exact path: prometheus_client's
parser over the kept lines, skipped lines (python_*, http_*, `_created`, ~70 % of a vLLM
scrape) checked with a loose pattern so that a body that is not exposition text (an HTML page,
a JSON error) is an error, not an empty scrape. The parser raises a bare ValueError without a
position; on that path only, the failing line is found by bisection and named in the
`ScrapeError`. `bench/bench_parse.py` measures all of them side by side.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from llmtop.core.raw import Labels, Sample, new_sample
from llmtop.errors import ScrapeError

_NAME = re.compile(r"[^{\s]+")
_LOOSE_SAMPLE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+[-+0-9.eEnNaAIf]+(?:[ \t]+-?[0-9.]+)?[ \t]*"
)
_MAX_SHOWN = 120

Keep = Callable[[str], bool]
"""Predicate on a sample name (``_total``/``_bucket`` kept) or a family name."""


def keep_names(sample_names: Iterable[str]) -> KeepNames:
    """A `Keep` for a set of sample names; their family names (`# HELP/TYPE`) match too."""
    return KeepNames(sample_names)


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
    if isinstance(keep, KeepNames):
        found = _fast(text, keep)
        if found is not None:
            return found
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


# --- the fast path -------------------------------------------------------------------------
# Line ends other than "\n" that str.splitlines() honours: a text holding one is left to the
# exact path, so that both paths always see the same lines.
_OTHER_ENDS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# The whole text, line by line, in the shapes the fast path accepts: a sample line that the
# exact path's loose check accepts, starting in column 0; a HELP line; a TYPE line that renames
# no sample (counter families named *_total, as every exporter writes them); a comment without
# "TYPE"; a blank line. Everything else goes to the exact path. The alternatives exclude each
# other, so a line matches one way only and a bad line late in the text cannot set off
# exponential backtracking over the lines before it.
_SHAPE = re.compile(
    rf"(?:{_METRIC}(?:\{{.*\}})?[ \t]+[-+0-9.eEnNaAIf]+(?:[ \t]+-?[0-9.]+)?[ \t]*\n"
    rf"|# (?:HELP .*|TYPE {_METRIC}(?:_total counter| (?:gauge|histogram|summary|untyped)))\n"
    r"|#(?! HELP )(?!.*TYPE).*\n"
    r"|[ \t]*\n)*"
)
# The labels part of a kept sample line in its plain form: no escapes, no blanks. Anything
# else (escapes, timestamps, duplicate or reserved labels) is left to the exact path.
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
_PLAIN_LABELS = re.compile(rf"(?:\{{(?:{_PAIR}(?:,{_PAIR})*,?)?\}})?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_INTEGER = re.compile(r"[-+]?[0-9]+")
_LABEL_CACHE: dict[str, Labels | None] = {}
_LABEL_CACHE_MAX = 50_000


def _alternation(words: Iterable[str]) -> str:
    """A regex matching exactly `words`, as a trie: one pass tests them all at once."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def node_rx(node: dict[str, Any]) -> str:
        alts = [re.escape(ch) + node_rx(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        if len(alts) == 1 and "" not in node:
            return alts[0]
        return "(?:" + "|".join(alts) + ")" + ("?" if "" in node else "")

    return node_rx(trie)


class KeepNames:
    """A `Keep` for a set of sample names, with the pattern that finds their lines in one pass.

    Their family names (`# HELP/TYPE`) match too.
    """

    def __init__(self, sample_names: Iterable[str]) -> None:
        self.names = frozenset(sample_names)
        self._all = frozenset(_family_of(n) for n in self.names) | self.names
        self.lines = re.compile(rf"\n({_alternation(self.names)})([{{ \t][^\n]*)")

    def __call__(self, name: str) -> bool:
        return name in self._all


def _labels(text: str) -> Labels | None:
    """Sorted labels of a sample's `{...}` part (memoised: label sets repeat every scrape);
    None when the exact parser must judge it (escapes, blanks, duplicate or `__` names)."""
    cached = _LABEL_CACHE.get(text, False)
    if cached is not False:
        return cached  # type: ignore[return-value]
    out: Labels | None = None
    if _PLAIN_LABELS.fullmatch(text) is not None:
        pairs = _LABEL.findall(text)
        names = {k for k, _ in pairs}
        if len(names) == len(pairs) and not any(k.startswith("__") for k in names):
            out = tuple(sorted(pairs))
    if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
        _LABEL_CACHE.clear()
    _LABEL_CACHE[text] = out
    return out


def _value(text: str) -> float | None:
    """The sample value as prometheus_client reads it (int first, so "-0" is 0.0); None if not."""
    if "_" in text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if value == 0.0 and _INTEGER.fullmatch(text):
        return 0.0
    return value


class _LineMemo:
    """Kept sample lines already read -> their Sample (None: the exact path must read it).

    Between two scrapes of a busy vLLM most kept lines do not change (64-74 % of the samples
    in the recorded runs of tests/fixtures), so each is parsed once. Two generations: when the
    current one is full it becomes the old one, and a line still in use moves back on reading.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.current: dict[tuple[str, str], Sample | None] = {}
        self.old: dict[tuple[str, str], Sample | None] = {}

    def read(self, line: tuple[str, str]) -> Sample | None:
        """The line's Sample, from the memo or parsed now."""
        sample = self.old.get(line, _MISSING)
        if sample is _MISSING:
            name, rest = line
            label_text, space, value_text = rest.rpartition(" ")
            labels = _labels(label_text) if space else None
            value = _value(value_text)
            sample = None if labels is None or value is None else new_sample(name, labels, value)
        if len(self.current) >= self.size:
            self.old, self.current = self.current, {}
        self.current[line] = sample
        return sample


_LINES = _LineMemo(_LABEL_CACHE_MAX)
_MISSING = Sample("", (), 0.0)
"""What the memo's current generation answers for a line it does not hold."""


def _fast(text: str, keep: KeepNames) -> tuple[Sample, ...] | None:
    """The kept samples, found without splitting lines; None when the text is not in the plain
    shape every exporter writes, and the exact path must read it."""
    if not text.isascii() and any(end in text for end in _OTHER_ENDS[6:]):
        return None
    if any(end in text for end in _OTHER_ENDS[:6]):
        return None
    if _SHAPE.fullmatch(text if text.endswith("\n") else text + "\n") is None:
        return None
    out: list[Sample] = []
    memo = _LINES
    for line in keep.lines.findall("\n" + text):  # (name, the rest of its line)
        sample = memo.current.get(line, _MISSING)
        if sample is _MISSING:
            sample = memo.read(line)
        if sample is None:
            return None
        out.append(sample)
    return tuple(out)
