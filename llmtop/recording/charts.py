"""PNG charts of a report: TTFT p95, KV usage, and engine waiting vs gateway queued over time.

matplotlib's `Figure` on Agg, never pyplot: no GUI backend is chosen and nothing global changes.
Unknown values stay gaps; each limit change is a dashed vertical line labelled with what changed.
matplotlib is the [report] extra: without it `write_charts` says so in one line (UsageError).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmtop.errors import UsageError
from llmtop.recording.report import Report

SIZE_IN = (9.0, 3.6)
DPI = 110


def _values(values: Sequence[float | None], scale: float = 1.0) -> list[float]:
    return [math.nan if v is None else v * scale for v in values]


def _minutes(r: Report) -> list[float]:
    t0 = r.start or 0.0
    return [(t - t0) / 60.0 for t in r.series.time]


def _figure(title: str, ylabel: str) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, loc="left", fontsize=11)
    ax.set_xlabel("minutes from start")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _mark_changes(ax: Any, r: Report) -> None:
    t0 = r.start or 0.0
    for c in r.limit_changes:
        x = (c.time - t0) / 60.0
        ax.axvline(x, color="0.35", linestyle="--", linewidth=1)
        ax.annotate(
            f"{c.field} {c.old}→{c.new}",
            xy=(x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=8,
            color="0.25",
        )


def _save(fig: Any, ax: Any, r: Report, path: Path) -> Path:
    _mark_changes(ax, r)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside upper right", ncols=3, fontsize=8, frameon=False)
    fig.savefig(path, format="png")
    return path


def write_charts(r: Report, out_dir: str | Path, *, ttft_slo_s: float | None = None) -> list[Path]:
    """ttft_p95.png, kv_usage.png and queues.png in `out_dir` (created); returns their paths.
    UsageError, before anything is written, where matplotlib cannot be imported."""
    try:
        import matplotlib.figure  # noqa: F401  (the [report] extra)
    except ImportError as e:
        raise UsageError(
            f"the report's charts need matplotlib: pip install 'llmtop-console[report]', or"
            f" leave out --out to print the report without them ({e})"
        ) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    x = _minutes(r)
    s = r.series
    written = []

    fig, ax = _figure("TTFT p95", "seconds")
    ax.plot(x, _values(s.ttft_p95_s), label="engine", color="tab:red")
    if any(v is not None for v in s.gateway_ttft_p95_s):
        ax.plot(
            x, _values(s.gateway_ttft_p95_s), label="gateway (queue included)", color="tab:purple"
        )
    if ttft_slo_s is not None:
        ax.axhline(ttft_slo_s, color="tab:green", linewidth=1, label=f"SLO {ttft_slo_s:g} s")
    ax.set_ylim(bottom=0)
    written.append(_save(fig, ax, r, out / "ttft_p95.png"))

    fig, ax = _figure("KV-cache usage", "%")
    ax.plot(x, _values(s.kv_cache_usage_frac, 100.0), color="tab:blue")
    ax.set_ylim(0, 105)
    written.append(_save(fig, ax, r, out / "kv_usage.png"))

    fig, ax = _figure("Engine waiting vs gateway queued", "requests")
    ax.plot(x, _values(s.waiting), label="engine waiting", color="tab:orange")
    ax.plot(x, _values(s.gateway_queued), label="gateway queued", color="tab:cyan")
    ax.set_ylim(bottom=0)
    written.append(_save(fig, ax, r, out / "queues.png"))
    return written
