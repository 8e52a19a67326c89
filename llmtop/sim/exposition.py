"""Prometheus text as vLLM's prometheus_client writes and filters it, for the sim's /metrics.

`Writer` lays out families, labels and numbers as prometheus_client does; `restrict` answers
`?name[]=...` as vLLM's /metrics/ does, so llmtop's narrow scrapes meet what a real vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from prometheus_client.utils import floatToGoString

from llmtop.sim.stats import Histogram

fmt: Callable[[float], str] = floatToGoString
"""prometheus_client's own number format (4.0, 1.79e+09, +Inf)."""


class Writer:
    """One scrape's lines for one engine (`base`: its engine and model_name labels)."""

    def __init__(self, base: str, created: str) -> None:
        self.base = base
        self.created = created
        """The `_created` value of every family: the engine's start, formatted."""
        self.out: list[str] = []

    def gauge(self, name: str, help_: str, values: Sequence[tuple[str, float]]) -> None:
        out = self.out
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} gauge")
        for extra, v in values:
            out.append(f"{name}{self._labels(extra)} {fmt(v)}")

    def counter(self, name: str, help_: str, values: Sequence[tuple[str, float]]) -> None:
        out = self.out
        out.append(f"# HELP {name}_total {help_}")
        out.append(f"# TYPE {name}_total counter")
        for extra, v in values:
            out.append(f"{name}_total{self._labels(extra)} {fmt(v)}")
        out.append(f"# HELP {name}_created {help_}")
        out.append(f"# TYPE {name}_created gauge")
        for extra, _ in values:
            out.append(f"{name}_created{self._labels(extra)} {self.created}")

    def histogram(self, name: str, help_: str, h: Histogram) -> None:
        out, base = self.out, self.base
        engine, model = base.split(",", 1)
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} histogram")
        cumulative = h.cumulative()
        for bound, c in zip(h.bounds, cumulative, strict=False):
            out.append(f'{name}_bucket{{{engine},le="{fmt(bound)}",{model}}} {float(c)}')
        out.append(f'{name}_bucket{{{engine},le="+Inf",{model}}} {float(cumulative[-1])}')
        out.append(f"{name}_count{{{base}}} {float(h.count)}")
        out.append(f"{name}_sum{{{base}}} {fmt(h.total)}")
        out.append(f"# HELP {name}_created {help_}")
        out.append(f"# TYPE {name}_created gauge")
        out.append(f"{name}_created{{{base}}} {self.created}")

    def _labels(self, extra: str) -> str:
        """engine, then extra labels sorted around model_name (prometheus_client sorts by key)."""
        if not extra:
            return "{" + self.base + "}"
        # base is 'engine="0",model_name="..."'; every extra label sorts between the two except
        # those after "model_name" (reason, sleep_state, source).
        engine, model = self.base.split(",", 1)
        if extra.split("=", 1)[0] < "model_name":
            return "{" + f"{engine},{extra},{model}" + "}"
        return "{" + f"{engine},{model},{extra}" + "}"


def escape(value: str) -> str:
    """A label value escaped as the text format wants it."""
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def restrict(text: str, names: Collection[str]) -> str:
    """The exposition `text` with only the samples whose name is in `names`."""
    out: list[str] = []
    header: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("#"):
            if line.startswith("# HELP "):
                header = [line]
            elif line.startswith("# TYPE ") and header:
                header.append(line)
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0].strip()
        if name and name in names:
            out.extend(header)
            header = []
            out.append(line)
    return "".join(out)
