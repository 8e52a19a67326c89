"""A target's whole scrape read in one match, when it has the layout it had last time.

A narrow scrape (`narrow`) holds only kept families, and a target's next scrape differs
from its last only in its values. So once a text has been read by `promtext.parse`, its lines
less their values are one pattern (`Memo.whole`): the next text is matched whole and its values
read in one call, without the pass that finds the family blocks and a call per block (~0.1 ms
of ~0.2 ms a narrow vLLM scrape). The pattern checks what the block pass checks: the same
lines, byte for byte, but for values made of the same value characters; a kept value of "-0"
does not match (prometheus_client reads it as 0, float() as -0.0). Anything else (a series
that came or went, a text with a skipped family, odd line ends) is read by `promtext.parse`,
as before, and the layout learnt again: at the first such miss and every `RELEARN_EVERY`th
after, so that a target whose lines keep changing stops paying for it. Compiled patterns are
shared by targets alike (a fleet of one model has one), at most `PATTERNS_MAX`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmtop.core.base.raw import Labels, Sample, samples_of
from llmtop.core.exposition import promtext
from llmtop.core.exposition.promtext import BLOCK_PASS, OTHER_ENDS, SKIPPED, VALUE_CHARS, KeepNames

RELEARN_EVERY = 8
PATTERNS_MAX = 32
_KEPT_VALUE = rf" ((?!-0+\n){VALUE_CHARS}+)\n"
_SKIPPED_VALUE = rf" {VALUE_CHARS}+\n"


@dataclass(frozen=True, slots=True)
class _Whole:
    pattern: re.Pattern[str]
    names: list[str]
    labels: list[Labels]


class Memo:
    """One target's last text layout (None: none learnt) and how often it missed."""

    __slots__ = ("misses", "whole")

    def __init__(self) -> None:
        self.whole: _Whole | None = None
        self.misses = 0


_compiled: dict[str, re.Pattern[str]] = {}


def parse(text: str, keep: KeepNames, memo: Memo) -> tuple[Sample, ...]:
    """`promtext.parse(text, keep)`, in one match when the text has `memo`'s layout."""
    whole = memo.whole
    if whole is not None:
        found = _read(text, whole)
        if found is not None:
            return found
    samples = promtext.parse(text, keep)  # raises as it always did
    memo.misses += 1
    if memo.misses % RELEARN_EVERY == 1:
        memo.whole = _learn(text, keep)
    return samples


def _read(text: str, whole: _Whole) -> tuple[Sample, ...] | None:
    if not text.isascii() or any(end in text for end in OTHER_ENDS[:6]):
        return None
    m = whole.pattern.fullmatch(text if text.endswith("\n") else text + "\n")
    if m is None:
        return None
    try:
        return tuple(samples_of(whole.names, whole.labels, map(float, m.groups())))
    except ValueError:
        return None


def _learn(text: str, keep: KeepNames) -> _Whole | None:
    """The layout of a text `promtext.parse` has just read; None when it holds a skipped
    family, a sample line outside a family block, or a block not read by a layout."""
    if not text.endswith("\n"):
        text += "\n"
    pieces: list[str] = []
    names: list[str] = []
    labels: list[Labels] = []
    for m in BLOCK_PASS.finditer(text):
        family, block, line, bad = m.groups()
        if family:
            layout = next(
                (x for x in keep.layouts.get(family, ()) if x.pattern.fullmatch(block)), None
            )
            if layout is None:
                return None  # a skipped family, or one read line by line
            pieces.append(re.escape(text[m.start() : m.start(2)]))
            for prefix, read in layout.reads:
                if read is None:
                    return None
                pieces.append(re.escape(prefix))
                pieces.append(_SKIPPED_VALUE if read is SKIPPED else _KEPT_VALUE)
            names += layout.names
            labels += layout.labels
        elif bad:
            return None
        elif line:
            if line[0] not in "# \t\n":
                return None  # a sample outside a block: left to the block pass
            pieces.append(re.escape(line))
    source = "".join(pieces)
    pattern = _compiled.get(source)
    if pattern is None:
        if len(_compiled) >= PATTERNS_MAX:
            _compiled.clear()
        pattern = _compiled[source] = re.compile(source)
    return _Whole(pattern, names, labels)
