"""Recompute a kv-exhausted finding's number from the figures it prints (issue 14, item 8: the
figures next to a finding must give the number it suggests)."""

from __future__ import annotations

import math
import re


def printed_fit(summary: str) -> tuple[int, int]:
    """(what the printed figures give, what the summary says fits): the KV tokens at the target
    fill (which must be the printed share of the printed capacity) / the printed tokens per
    request, in whole blocks when named; that size must in turn be what its printed basis gives
    (prompt + output, or usage x capacity / running, within their rounding)."""

    def num(pattern: str) -> int:
        m = re.search(pattern, summary)
        assert m is not None, (pattern, summary)
        return int(m.group(1).replace(",", ""))

    m = re.search(r"([\d,]+) KV tokens \(([\d.]+)% target of ([\d,]+)\) /", summary)
    assert m is not None, summary
    budget, cap = int(m.group(1).replace(",", "")), int(m.group(3).replace(",", ""))
    assert budget == math.floor(cap * float(m.group(2)) / 100), summary
    mean = re.search(r"\(([\d,]+) prompt \+ ([\d,]+) output\)", summary)
    held = re.search(r"\(([\d.]+)% of the cache held by ([\d,]+) running", summary)
    if mean is not None:
        basis: float = sum(int(x.replace(",", "")) for x in mean.groups())
    else:
        assert held is not None, summary
        basis = float(held.group(1)) / 100 * cap / int(held.group(2).replace(",", ""))
    size = num(r"\) / ([\d,]+) tokens per request")
    assert abs(size - basis) <= 1 + 0.001 * cap, (size, basis, summary)
    block = re.search(r"in (\d+)-token blocks", summary)
    if block:
        b = int(block.group(1))
        fits = (budget // b - 1) // math.ceil(size / b)
    else:
        fits = math.floor(budget / size)
    return max(1, fits), num(r"= (\d+) sequences fit")
