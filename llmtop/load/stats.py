"""The arithmetic of a load run, pure, so the generator, the demo and the tests share one "good
request" (docs/load.md): TTFT from the first attempt's offer (a 429's Retry-After counts), ITL
judged per request on its mean gap (TPOT, as vLLM's benchmark), goodput the 200s within every
bound over those judged (one cut at the duration is judged only if it had already missed).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llmtop.core.base.slo import SloSettings
from llmtop.core.derive.percentiles import percentile_linear
from llmtop.errors import UsageError

Outcome = Literal["ok", "http_error", "rejected", "error", "cut"]
"""ok: 200 and the stream ended; http_error: a non-200 other than a final 429; rejected: a 429
not retried (or still 429 when retries ran out); error: a connection or protocol failure;
cut: still running when the duration bound stopped the run."""


@dataclass(frozen=True)
class Slo:
    """The latency bounds a request must meet to count as goodput; None = no bound. By
    default the SLO's (core/base/slo.py, [slo]); `llmtop load` may add an end-to-end one."""

    ttft_s: float | None = SloSettings.ttft_s
    itl_s: float | None = SloSettings.itl_s
    e2e_s: float | None = None

    def describe(self) -> str:
        """'ttft=2,itl=0.1': the bounds set, for the summary line."""
        parts = [
            f"{k}={v:g}"
            for k, v in (("ttft", self.ttft_s), ("itl", self.itl_s), ("e2e", self.e2e_s))
            if v is not None
        ]
        return ",".join(parts) or "none"


def parse_prompt_tokens(text: str) -> tuple[int, int]:
    """'512' -> (512, 512); '100:2000' -> (100, 2000): prompt lengths drawn uniformly."""
    lo_s, sep, hi_s = text.partition(":")
    try:
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
    except ValueError:
        raise UsageError(f"bad --prompt-tokens {text!r}: expected P or P1:P2") from None
    if lo < 1 or hi < lo:
        raise UsageError(f"bad --prompt-tokens {text!r}: need 1 <= P1 <= P2")
    return lo, hi


@dataclass(frozen=True)
class RequestResult:
    """What the client saw of one offered request (all times in seconds)."""

    offered_at_s: float
    """Offset from the start of the run at which the request was offered."""
    outcome: Outcome
    status: int | None = None
    """HTTP status of the last attempt (None: no response)."""
    error: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    itl_s: tuple[float, ...] = ()
    """Gaps between successive content chunks."""
    e2e_s: float | None = None
    elapsed_s: float = 0.0
    """Time from offer to the end (or the cut) of the request."""
    rejections: int = 0
    """429 responses received, retried ones included."""
    retry_after_given: int = 0
    """429s that carried a Retry-After header."""
    retry_after_honoured: int = 0
    """Retries sent no earlier than the Retry-After they were told to wait."""
    reject_reason: str | None = None
    """The gateway's reason for the last 429 (queue_full, queue_timeout, ...)."""

    @property
    def tpot_s(self) -> float | None:
        """Mean gap between tokens of this request (None with fewer than two chunks)."""
        return sum(self.itl_s) / len(self.itl_s) if self.itl_s else None


def verdict(r: RequestResult, slo: Slo) -> bool | None:
    """True: goodput; False: offered and missed; None: cut before it could be judged."""
    if r.outcome == "cut":
        if slo.ttft_s is not None and r.ttft_s is None and r.elapsed_s > slo.ttft_s:
            return False
        if slo.ttft_s is not None and r.ttft_s is not None and r.ttft_s > slo.ttft_s:
            return False
        return None
    if r.outcome != "ok":
        return False
    if slo.ttft_s is not None and (r.ttft_s is None or r.ttft_s > slo.ttft_s):
        return False
    tpot = r.tpot_s
    if slo.itl_s is not None and tpot is not None and tpot > slo.itl_s:
        return False
    return not (slo.e2e_s is not None and (r.e2e_s is None or r.e2e_s > slo.e2e_s))


@dataclass(frozen=True)
class Dist:
    """Percentiles of one latency, in seconds; None when nothing was measured."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist:
        return cls(
            count=len(values),
            mean=sum(values) / len(values) if values else None,
            p50=percentile_linear(values, 50),
            p90=percentile_linear(values, 90),
            p95=percentile_linear(values, 95),
            p99=percentile_linear(values, 99),
            max=max(values) if values else None,
        )


@dataclass(frozen=True)
class LoadSummary:
    """The figures a load run reports (table or JSON)."""

    wall_s: float
    offered: int
    ok: int
    cut: int
    judged: int
    good: int
    rejected: int
    """Requests whose final answer was a 429."""
    rejections_429: int
    """All 429 responses, including those later retried."""
    retry_after_given: int
    retry_after_honoured: int
    errors: int
    status_codes: dict[str, int]
    error_kinds: dict[str, int]
    reject_reasons: dict[str, int]
    prompt_tokens: int
    output_tokens: int
    ttft: Dist
    itl: Dist
    tpot: Dist
    e2e: Dist
    slo: Slo = field(default_factory=Slo)

    @property
    def goodput_frac(self) -> float | None:
        """Share of judged offered requests that met the SLO."""
        return self.good / self.judged if self.judged else None

    @property
    def request_per_s(self) -> float | None:
        return self.ok / self.wall_s if self.wall_s > 0 else None

    @property
    def goodput_per_s(self) -> float | None:
        return self.good / self.wall_s if self.wall_s > 0 else None

    @property
    def output_tok_per_s(self) -> float | None:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else None


def summarize(results: Iterable[RequestResult], wall_s: float, slo: Slo) -> LoadSummary:
    """Fold the per-request results of a run into its summary."""
    rs = list(results)
    verdicts = [verdict(r, slo) for r in rs]
    codes = Counter(str(r.status) if r.status is not None else "none" for r in rs)
    errors = Counter(r.error.split(":")[0] for r in rs if r.outcome == "error" and r.error)
    reasons = Counter(r.reject_reason or "unknown" for r in rs if r.outcome == "rejected")
    ok = [r for r in rs if r.outcome == "ok"]
    return LoadSummary(
        wall_s=wall_s,
        offered=len(rs),
        ok=len(ok),
        cut=sum(1 for r in rs if r.outcome == "cut"),
        judged=sum(1 for v in verdicts if v is not None),
        good=sum(1 for v in verdicts if v),
        rejected=sum(1 for r in rs if r.outcome == "rejected"),
        rejections_429=sum(r.rejections for r in rs),
        retry_after_given=sum(r.retry_after_given for r in rs),
        retry_after_honoured=sum(r.retry_after_honoured for r in rs),
        errors=sum(1 for r in rs if r.outcome in ("error", "http_error")),
        status_codes=dict(sorted(codes.items())),
        error_kinds=dict(sorted(errors.items())),
        reject_reasons=dict(sorted(reasons.items())),
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        output_tokens=sum(r.output_tokens for r in rs),
        ttft=Dist.of([r.ttft_s for r in rs if r.ttft_s is not None]),
        itl=Dist.of([g for r in rs for g in r.itl_s]),
        tpot=Dist.of([t for r in ok if (t := r.tpot_s) is not None]),
        e2e=Dist.of([r.e2e_s for r in ok if r.e2e_s is not None]),
        slo=slo,
    )


def interarrivals(n: int, rate_per_s: float, burstiness: float, rng: random.Random) -> list[float]:
    """n gaps (s) between arrivals: gamma with shape=burstiness, mean 1/rate."""
    if rate_per_s <= 0 or burstiness <= 0:
        raise UsageError("--rate and --burstiness must be > 0")
    scale = 1.0 / (rate_per_s * burstiness)
    return [rng.gammavariate(burstiness, scale) for _ in range(n)]


def _ms(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    return f"{v:.2f} s" if v < 10 else f"{v:.1f} s"


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "n/a" if v is None else format(v, fmt)


def format_table(s: LoadSummary) -> str:
    """A plain-text summary for a terminal."""
    good = s.goodput_frac
    lines = [
        f"requests   offered {s.offered}  ok {s.ok}  429 {s.rejected}  errors {s.errors}"
        f"  cut {s.cut}  in {s.wall_s:.1f} s",
        f"status     {' '.join(f'{k}:{v}' for k, v in s.status_codes.items()) or 'none'}",
        f"throughput {_num(s.request_per_s, '.2f')} req/s  {_num(s.output_tok_per_s)} output tok/s",
        f"goodput    {'n/a' if good is None else f'{good:.0%}'} of {s.judged} judged"
        f" ({s.good} met {s.slo.describe()})  {_num(s.goodput_per_s, '.2f')} req/s",
    ]
    if s.rejections_429:
        lines.append(
            f"429s       {s.rejections_429} received, {s.retry_after_given} with Retry-After,"
            f" {s.retry_after_honoured} retried after it"
            + (f"  reasons {s.reject_reasons}" if s.reject_reasons else "")
        )
    if s.error_kinds:
        lines.append(f"errors     {s.error_kinds}")
    lines.append("")
    lines.append(f"{'':10} {'p50':>9} {'p90':>9} {'p95':>9} {'p99':>9} {'max':>9} {'n':>7}")
    for name, d in (("TTFT", s.ttft), ("ITL", s.itl), ("TPOT", s.tpot), ("E2E", s.e2e)):
        lines.append(
            f"{name:10} {_ms(d.p50):>9} {_ms(d.p90):>9} {_ms(d.p95):>9} {_ms(d.p99):>9}"
            f" {_ms(d.max):>9} {d.count:>7}"
        )
    return "\n".join(lines)


def _dist_json(d: Dist) -> dict[str, Any]:
    return {
        "count": d.count,
        "mean_s": d.mean,
        "p50_s": d.p50,
        "p90_s": d.p90,
        "p95_s": d.p95,
        "p99_s": d.p99,
        "max_s": d.max,
    }


def to_json(s: LoadSummary) -> dict[str, Any]:
    """The summary as plain JSON-serialisable data (units in the keys)."""
    return {
        "wall_s": s.wall_s,
        "offered": s.offered,
        "ok": s.ok,
        "cut": s.cut,
        "rejected": s.rejected,
        "errors": s.errors,
        "status_codes": s.status_codes,
        "error_kinds": s.error_kinds,
        "rejections_429": s.rejections_429,
        "retry_after_given": s.retry_after_given,
        "retry_after_honoured": s.retry_after_honoured,
        "reject_reasons": s.reject_reasons,
        "slo": {"ttft_s": s.slo.ttft_s, "itl_s": s.slo.itl_s, "e2e_s": s.slo.e2e_s},
        "judged": s.judged,
        "good": s.good,
        "goodput_frac": s.goodput_frac,
        "goodput_per_s": s.goodput_per_s,
        "request_per_s": s.request_per_s,
        "prompt_tokens": s.prompt_tokens,
        "output_tokens": s.output_tokens,
        "output_tok_per_s": s.output_tok_per_s,
        "ttft": _dist_json(s.ttft),
        "itl": _dist_json(s.itl),
        "tpot": _dist_json(s.tpot),
        "e2e": _dist_json(s.e2e),
    }
