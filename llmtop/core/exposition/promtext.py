"""Exposition text -> the `Sample`s llmtop reads; errors name the line. Two paths, one answer
(tests/unit/test_promtext.py, the fuzz tests): prometheus_client's parser, its ValueError made
a `ScrapeError`, and for `keep_names` on text in every exporter's plain shape one regex pass
(escapes, timestamps, CRs go exact): buys ~22 % of a core at 100 replicas, BENCHMARKS §15.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable

from llmtop.core.base.raw import Labels, Sample
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
    # the exact path, for what the fast one declines: its parser (and the ~20 ms of
    # prometheus_client's package) is imported only when a scrape needs it
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            out.append(Sample(s.name, tuple(sorted(s.labels.items())), _float(s.value)))
    return tuple(out)


def _float(value: float) -> float:
    """prometheus_client reads "123" as an int; one past a float's range is ±inf, as float()
    reads its text (and as the fast path does), not an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


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


# --- the fast path ---------------------------------------------------------------------------
# Line ends other than "\n" that str.splitlines() honours: a text holding one is left to the
# exact path, so that both paths always see the same lines.
_OTHER_ENDS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_TYPES = r" (?:gauge|histogram|summary|untyped)"
_VALUE_CHARS = r"[-+0-9.eEnNaAIf]"
# Possessive repeats (3.11+) match the same lines here (what follows them is never a character
# they take, or always matches), with less bookkeeping per line.
_ONCE = "+" if sys.version_info >= (3, 11) else ""
# The text in one pass, one match per family block or other line, in the shapes the fast path
# accepts (the exact path's loose check of skipped lines, starting in column 0; HELP lines; TYPE
# lines that rename no sample: counter families named *_total, as every exporter writes them;
# comments without "TYPE"; blank lines):
#   1. a family block: "# HELP F ...", its TYPE line, then its sample lines in the plain form
#      every exporter writes: a name starting with F, plain `{...}` or none, one space, the
#      value (group 1: F, group 2: the sample lines). Per line only a comparison with F and a
#      few character classes: the cheap way through the ~70 % of a vLLM scrape llmtop skips.
#   2. any other line in those shapes (group 3);
#   3. anything else: a line the exact path must judge (group 4), or "" at the end of the text.
# The third alternative always matches, so the pass never backtracks over earlier lines, and
# each match starts where the last ended: every line is seen.
_BLOCK_PASS = re.compile(
    rf"# HELP ({_METRIC}{_ONCE}) .*\n(?:# TYPE \1(?:(?<=_total) counter|{_TYPES})\n)?"
    rf"((?:\1[a-zA-Z0-9_:]*{_ONCE}(?:\{{.*\}} | ){_VALUE_CHARS}+{_ONCE}\n)*{_ONCE})"
    rf"|({_METRIC}(?:\{{.*\}})?[ \t]+{_VALUE_CHARS}+(?:[ \t]+-?[0-9.]+)?[ \t]*\n"
    rf"|# (?:HELP .*|TYPE {_METRIC}(?:_total counter|{_TYPES}))\n"
    r"|#(?! HELP )(?!.*TYPE).*\n"
    r"|[ \t]*\n)"
    r"|(.*\n?)"
)
_STRAY_NAME = re.compile(_METRIC)
_BARE_COUNTER = re.compile(rf"# TYPE ({_METRIC}) counter\n?")
"""A TYPE line the pass leaves to the exact path: a counter family not named *_total."""
# The labels part of a kept sample line in its plain form: no escapes, no blanks. Anything
# else (escapes, timestamps, duplicate or reserved labels) is left to the exact path.
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
_PLAIN_LABELS = re.compile(rf"(?:\{{(?:{_PAIR}(?:,{_PAIR})*,?)?\}})?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_INTEGER = re.compile(r"[-+]?[0-9]+")
_PREFIXES_MAX = 50_000

_Read = tuple[str, Labels] | None
"""What the text before a block line's value reads as: (name, labels); None when the exact path
must judge it. A skipped name reads as `_SKIPPED`."""
_SKIPPED: tuple[str, Labels] = ("(skipped)", ())
_UNREAD: tuple[str, Labels] = ("(not read yet)", ())  # told apart by identity: not names
_SKIPPED_SAMPLE = Sample("(skipped)", (), 0.0)


class KeepNames:
    """A `Keep` for a set of sample names, with what the fast path needs to find their lines.

    Their family names (`# HELP/TYPE`) match too, on sample lines as on the exact path.
    """

    def __init__(self, sample_names: Iterable[str]) -> None:
        self.names = frozenset(sample_names)
        self._all = frozenset(_family_of(n) for n in self.names) | self.names
        self._heads = frozenset(n[:i] for n in self._all for i in range(1, len(n) + 1))
        """Every start of a kept name: a family block whose name is not one holds none."""
        self._prefixes: dict[str, _Read] = {}
        """The text before a block line's value -> how it reads (the same every scrape)."""

    def __call__(self, name: str) -> bool:
        return name in self._all

    def read_block(self, block: str, out: list[Sample]) -> bool:
        """Append a kept family's samples from its block lines; False when the exact path must
        read the text. What a line's text before its value reads as (name, labels) is the same
        every scrape, so it is worked out once (`_prefixes`); each line then costs a lookup and
        a float()."""
        for line in block.split("\n")[:-1]:
            prefix, _, value_text = line.rpartition(" ")  # a block line: one space, the value
            read = self._prefixes.get(prefix, _UNREAD)
            if read is _UNREAD:
                read = self._read_prefix(prefix)
            if read is None:
                return False
            if read is _SKIPPED:
                continue
            try:  # the value characters: no "_", no blanks, as prometheus_client requires
                value = float(value_text)
            except ValueError:
                return False
            if value == 0.0 and value_text[0] == "-" and _INTEGER.fullmatch(value_text):
                value = 0.0  # "-0": prometheus_client reads an int first
            out.append(Sample(read[0], read[1], value))
        return True

    def _read_prefix(self, prefix: str) -> _Read:
        name, brace, label_text = prefix.partition("{")
        if name not in self._all:
            out: _Read = _SKIPPED
        else:
            labels = _labels(brace + label_text)
            out = None if labels is None else (name, labels)
        if len(self._prefixes) >= _PREFIXES_MAX:
            self._prefixes.clear()
        self._prefixes[prefix] = out
        return out


def _labels(text: str) -> Labels | None:
    """Sorted labels of a sample's `{...}` part; None when the exact parser must judge it
    (escapes, blanks, duplicate or `__` names)."""
    if _PLAIN_LABELS.fullmatch(text) is None:
        return None
    pairs = _LABEL.findall(text)
    names = {k for k, _ in pairs}
    if len(names) != len(pairs) or any(k.startswith("__") for k in names):
        return None
    return tuple(sorted(pairs))


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


def _stray(line: str, keep: KeepNames) -> Sample | None:
    """A sample line outside a family block (the block's form broken: a timestamp, a tab, a
    name not of the family): _SKIPPED_SAMPLE when skipped, None when the exact path must judge."""
    name = _STRAY_NAME.match(line).group(0)  # type: ignore[union-attr]  # a sample line
    if name not in keep._all:
        return _SKIPPED_SAMPLE
    label_text, space, value_text = line[len(name) : -1].rpartition(" ")
    labels = _labels(label_text) if space else None
    value = _value(value_text)
    return None if labels is None or value is None else Sample(name, labels, value)


def _fast(text: str, keep: KeepNames) -> tuple[Sample, ...] | None:
    """The kept samples, read in one regex pass; None when the text is not in the plain shape
    every exporter writes, and the exact path must read it."""
    if not text.isascii() and any(end in text for end in _OTHER_ENDS[6:]):
        return None
    if any(end in text for end in _OTHER_ENDS[:6]):
        return None
    out: list[Sample] = []
    heads = keep._heads
    bare = _BareCounter()
    for family, block, line, bad in _BLOCK_PASS.findall(
        text if text.endswith("\n") else text + "\n"
    ):
        if family:
            if family == bare.name:
                return None  # "# HELP F" after "# TYPE F counter": one family on the exact path
            before = len(out)
            if family in heads and not keep.read_block(block, out):
                return None  # else no kept name starts with it: skipped, checked by the pass
            if keep(family) or len(out) > before:
                bare.name = None
        elif bad:
            found = _BARE_COUNTER.fullmatch(bad)
            if found is None:
                return None
            if keep(found.group(1)) and not bare.begin(found.group(1), out):
                return None
            # else not kept: the exact path drops the TYPE line and reads the family's sample
            # lines by their own names, as the pass does
        elif line and line[0] not in "# \t\n":
            sample = _stray(line, keep)
            if sample is None:
                return None
            if sample is not _SKIPPED_SAMPLE:
                out.append(bare.named(sample))
        elif line.startswith(("# HELP ", "# TYPE ")) and keep(
            named := line.split(" ", 3)[2].rstrip("\n")
        ):
            if named == bare.name:
                return None
            bare.name = None
    return tuple(out)


class _BareCounter:
    """A kept counter typed without `_total` (TGI's, Dynamo's, llama.cpp's), as prometheus_client
    reads it: the sample lines named F right after `# TYPE F counter`, among the kept lines, are
    F_total; the first other kept line ends the family. Anything less plain (a sample F before
    its TYPE line, a HELP or TYPE of F inside the family) is left to the exact path."""

    def __init__(self) -> None:
        self.name: str | None = None

    def begin(self, name: str, out: list[Sample]) -> bool:
        if any(s.name == name for s in out):
            return False
        self.name = name
        return True

    def named(self, sample: Sample) -> Sample:
        if sample.name == self.name:
            return Sample(sample.name + "_total", sample.labels, sample.value)
        self.name = None
        return sample
