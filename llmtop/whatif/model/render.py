"""The fit's own error, and an analysis (the window, the fit, the predictions) as a table or
JSON: every figure labelled a prediction. Pure."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from llmtop.core.derive.histogram import histogram_quantile
from llmtop.whatif.model.calibrate import Calibration
from llmtop.whatif.model.predict import Options, Prediction
from llmtop.whatif.model.window import Observed, Point


@dataclass(frozen=True)
class FitCheck:
    """One figure of the current setting: what the window showed and what the model replays."""

    name: str
    observed: float | None
    predicted: float | None

    @property
    def error_frac(self) -> float | None:
        """(predicted - observed) / observed; None when either is unknown or observed is 0."""
        if self.observed is None or self.predicted is None or self.observed == 0:
            return None
        return (self.predicted - self.observed) / self.observed


@dataclass(frozen=True)
class Analysis:
    """The window, the fit, its error and the predictions (current setting first)."""

    observed: Observed
    calibration: Calibration
    checks: list[FitCheck]
    predictions: list[Prediction]
    options: Options
    bands: list[tuple[Prediction, Prediction]] = field(default_factory=list)
    """Per prediction: the same at the arrival rate one standard error lower, and higher."""
    points: tuple[Point, ...] = ()
    """The window's scrapes the fit was made from."""

    def text(self) -> str:
        return to_text(self)

    def json(self) -> str:
        return json.dumps(to_json(self), indent=2)


def bucketed_p95(values: Sequence[float], bounds: Sequence[float]) -> float | None:
    """p95 of `values` read the way the window's was: through the same histogram buckets."""
    if not values or not bounds:
        return None
    ordered = sorted(bounds)
    counts = [float(sum(1 for v in values if v <= le)) for le in ordered]
    if not math.isinf(ordered[-1]):
        ordered.append(math.inf)
        counts.append(float(len(values)))
    return histogram_quantile(0.95, list(zip(ordered, counts, strict=True)))


def fit_checks(obs: Observed, current: Prediction) -> list[FitCheck]:
    """The model replaying the current setting against the window, figure by figure."""
    eng = current.ttft_engine_all
    checks = [
        FitCheck("output tok/s", obs.generation_tok_per_s, current.output_tok_per_s),
        FitCheck("engine TTFT mean (s)", obs.ttft_mean_s, sum(eng) / len(eng) if eng else None),
        FitCheck("engine TTFT p95 (s)", obs.ttft_p95_s, bucketed_p95(eng, obs.ttft_buckets)),
        FitCheck("mean ITL (s)", obs.itl_mean_s, current.tpot_mean_s),
    ]
    if obs.gateway_ttft_p95_s is not None:
        checks.append(
            FitCheck("client TTFT p95 (s)", obs.gateway_ttft_p95_s, current.ttft_client_p95_s)
        )
    return checks


def span(horizon_s: float, from_now: bool, warmup_s: float) -> str:
    """What time a prediction covers, in words."""
    if from_now:
        after = f" after {warmup_s:.0f} s" if warmup_s else ""
        return f"for the {horizon_s:.0f} s{after} from the moment the limit is applied"
    return f"in steady state ({horizon_s:.0f} s after a {warmup_s:.0f} s warm-up)"


def _s(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _err(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.0%}"


COLUMNS = (
    "setting",
    "TTFT p50",
    "TTFT p95",
    "engine p95",
    "ITL p95",
    "goodput",
    "tok/s",
    "queue p95",
    "rejected",
    "preempt/min",
)
BAND_COLUMNS = ("TTFT p95 at rate -/+1 se", "tok/s at rate -/+1 se")


def to_text(a: Analysis) -> str:
    """The report: what was observed, the fit and its error, then the predictions' table."""
    obs, cal, o = a.observed, a.calibration, a.options
    f = cal.fit
    lines = [
        f"window {obs.span_s:.0f} s, {obs.scrapes} scrapes: {obs.arrival_per_s:.2f}"
        f" ± {obs.arrival_error_per_s or 0.0:.2f} req/s arriving"
        f" ({obs.arrival_source}; Poisson assumed), {obs.generation_tok_per_s:,.0f} output tok/s,"
        f" {obs.running_mean:.1f} running",
        f"engine model: KV {cal.kv_tokens:,} tokens (block {cal.profile.block_size}),"
        f" decode step {f.decode_floor_s * 1000:.1f} ms + {f.kv_s_per_token * 1e9:.1f} ns/KV token"
        f" ({f.slope_from}), prefill {f.prefill_s_per_token * 1e6:.1f} us/token ({f.prefill_from}),"
        f" front end {cal.frontend_s * 1000:.0f} ms/request (engine TTFT - queue - prefill)",
        f"workload: prompts mean {cal.prompt_len.mean:.0f} tokens, outputs mean"
        f" {cal.output_len.mean:.0f} tokens (histograms, {obs.lengths_from})",
        "fit error (the model replaying the current setting vs the window): "
        + ", ".join(f"{c.name} {_err(c.error_frac)}" for c in a.checks),
    ]
    lines += [f"note: {n}" for n in cal.notes]
    lines.append("")
    lines.append(
        f"PREDICTED {span(o.horizon_s, o.from_now, o.warmup_s)} (a model, not a measurement;"
        f" goodput: TTFT <= {o.ttft_slo_s:g} s and mean ITL <= {o.itl_slo_s:g} s):"
    )
    header = list(COLUMNS) + (list(BAND_COLUMNS) if a.bands else [])
    rows = [header]
    for i, p in enumerate(a.predictions):
        lim = p.candidate.limits
        label = p.candidate.label
        if lim is not None:
            label += (
                f" (cap {lim.max_concurrency}, queue {lim.max_queue}, {lim.queue_timeout_s:g} s)"
            )
        rejected = f"{p.rejected / p.offered:.0%}" if p.offered else "n/a"
        rows.append(
            [
                label,
                _s(p.ttft_client_p50_s),
                _s(p.ttft_client_p95_s),
                _s(p.ttft_engine_p95_s),
                _s(p.itl_p95_s),
                _pct(p.goodput_frac),
                f"{p.output_tok_per_s:,.0f}",
                _s(p.queue_wait_p95_s),
                rejected,
                f"{p.preemptions_per_min:,.0f}",
            ]
        )
        if a.bands:
            lo, hi = a.bands[i]
            rows[-1] += [
                _range(lo.ttft_client_p95_s, hi.ttft_client_p95_s, _s),
                _range(lo.output_tok_per_s, hi.output_tok_per_s, lambda v: f"{v or 0:,.0f}"),
            ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    return "\n".join(lines)


def _band_json(band: tuple[Prediction, Prediction] | None) -> dict[str, Any]:
    if band is None:
        return {}
    lo, hi = band
    return {
        "at_arrival_rate_minus_1se": {
            "ttft_client_p95_s": lo.ttft_client_p95_s,
            "output_tok_per_s": lo.output_tok_per_s,
        },
        "at_arrival_rate_plus_1se": {
            "ttft_client_p95_s": hi.ttft_client_p95_s,
            "output_tok_per_s": hi.output_tok_per_s,
        },
    }


def _range(lo: float | None, hi: float | None, fmt: Callable[[float | None], str]) -> str:
    if lo is None or hi is None:
        return "n/a"
    a, b = sorted((lo, hi))
    return f"{fmt(a)}-{fmt(b)}"


def prediction_json(p: Prediction) -> dict[str, Any]:
    """The setting and its limits, then every figure of the prediction in its field order (the
    engine TTFTs themselves left out: the fit check reads them)."""
    lim = p.candidate.limits
    return {
        "setting": p.candidate.label,
        "limits": lim.to_dict() if lim is not None else None,
        "predicted": True,
        **{
            f.name: getattr(p, f.name)
            for f in fields(p)
            if f.name not in ("candidate", "ttft_engine_all")
        },
    }


def to_json(a: Analysis) -> dict[str, Any]:
    """One JSON object: the window, the fit, its error, and the predictions."""
    obs, cal, o = a.observed, a.calibration, a.options
    f = cal.fit
    return {
        "observed": {
            "window_s": obs.span_s,
            "scrapes": obs.scrapes,
            "arrival_per_s": obs.arrival_per_s,
            "arrival_source": obs.arrival_source,
            "arrival_error_per_s": obs.arrival_error_per_s,
            "output_tok_per_s": obs.generation_tok_per_s,
            "running_mean": obs.running_mean,
            "ttft_engine_p95_s": obs.ttft_p95_s,
            "ttft_client_p95_s": obs.gateway_ttft_p95_s,
            "itl_mean_s": obs.itl_mean_s,
            "kv_capacity_tokens": obs.kv_capacity_tokens,
            "block_size": obs.block_size,
        },
        "fit": {
            "overhead_s": f.overhead_s,
            "weights_s": f.weights_s,
            "kv_s_per_token": f.kv_s_per_token,
            "prefill_s_per_token": f.prefill_s_per_token,
            "slope_from": f.slope_from,
            "prefill_from": f.prefill_from,
            "frontend_s": cal.frontend_s,
            "max_num_batched_tokens": cal.max_num_batched_tokens,
            "max_num_seqs": cal.max_num_seqs,
            "prompt_mean_tokens": cal.prompt_len.mean,
            "output_mean_tokens": cal.output_len.mean,
            "notes": cal.notes,
        },
        "fit_error": [
            {
                "figure": c.name,
                "observed": c.observed,
                "predicted": c.predicted,
                "error_frac": c.error_frac,
            }
            for c in a.checks
        ],
        "horizon_s": o.horizon_s,
        "warmup_s": o.warmup_s,
        "from_now": o.from_now,
        "slo": {"ttft_s": o.ttft_slo_s, "itl_s": o.itl_slo_s},
        "predictions": [
            {**prediction_json(p), **_band_json(a.bands[i] if i < len(a.bands) else None)}
            for i, p in enumerate(a.predictions)
        ],
    }


def caps_around(current: int | None, suggested: int | None, limit: int = 4) -> tuple[int, ...]:
    """Candidate caps for the what-if screen: the findings' suggestion (KV fit), then the current
    cap doubled and its neighbours, then half and double the suggestion; at most `limit`, the
    current cap left out (it is the table's first row anyway). The current cap's steps come
    before the suggestion's: on a large cache the KV fit is hundreds (352 for h100-8b), and its
    half and double then predicted the same as it, filling the table with one row three times."""
    base = suggested or current or 8
    picks = [base]
    if current is not None:
        picks += [current * 2, max(1, current - 1), current + 1, max(1, current // 2)]
    picks += [max(1, base // 2), base * 2]
    out: list[int] = []
    for c in picks:
        if c != current and c not in out and c <= 1024:
            out.append(c)
    return tuple(sorted(out[:limit]))


def preview_line(
    obs: Observed, checks: Sequence[FitCheck], now: Prediction, new: Prediction, horizon_s: float
) -> str:
    """One line for the TUI's `:cap N`: the prediction beside what the window measured.

    TTFT here is the client's (the gateway's queue included), which a cap trades against the
    engine's TTFT the latency panel shows; the line says so."""
    lim = new.candidate.limits
    cap = lim.max_concurrency if lim is not None else None
    rejected = f"{new.rejected / new.offered:.0%}" if new.offered else "n/a"
    fit = {c.name: c.error_frac for c in checks}
    return (
        f"PREDICTED cap {cap}, next {horizon_s:.0f} s: client TTFT p95"
        f" {_s(new.ttft_client_p95_s)},"
        f" goodput {_pct(new.goodput_frac)}, {new.output_tok_per_s:,.0f} tok/s,"
        f" 429s {rejected} | measured now: client TTFT p95 {_s(obs.gateway_ttft_p95_s)},"
        f" {obs.generation_tok_per_s:,.0f} tok/s | fit error: tok/s"
        f" {_err(fit.get('output tok/s'))}, TTFT p95 {_err(fit.get('client TTFT p95 (s)'))}"
    )
