"""A ground truth in virtual time: a known sim profile behind the gateway's admission code, driven
by Poisson traffic and scraped once a virtual second exactly as /metrics and /admin/stats would
be. Tests and bench/bench_whatif.py calibrate from these scrapes alone and compare the
prediction with what the known engine then does. Pure (no sockets, no wall clock).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmtop.core import promtext
from llmtop.gateway.admission import AdmissionController
from llmtop.gateway.limits import Limits
from llmtop.sim.engine import Engine
from llmtop.sim.metrics import MetricsRenderer
from llmtop.sim.profiles import Profile
from llmtop.whatif.calibrate import Calibration, StepFit
from llmtop.whatif.lengths import LengthDist
from llmtop.whatif.predict import Candidate, Prediction, predict
from llmtop.whatif.window import Point, point, sample_names

_KEEP = promtext.keep_names(sample_names())


@dataclass(frozen=True)
class Truth:
    """The known engine and traffic (what the predictor must not be told)."""

    profile: Profile
    kv_tokens: int | None
    arrival_per_s: float
    prompt_len: LengthDist
    output_len: LengthDist
    limits: Limits

    def calibration(self, limits: Limits | None = None) -> Calibration:
        """The exact inputs: running `predict` on these is the ground truth."""
        p = self.profile
        kv = self.kv_tokens if self.kv_tokens is not None else p.derived_kv_tokens()
        kv -= kv % p.block_size
        return Calibration(
            profile=p,
            kv_tokens=kv,
            max_num_seqs=p.max_num_seqs,
            max_num_batched_tokens=p.max_num_batched_tokens,
            max_model_len=min(p.max_model_len, kv),
            arrival_per_s=self.arrival_per_s,
            prompt_len=self.prompt_len,
            output_len=self.output_len,
            limits=limits or self.limits,
            fit=StepFit(0.0, 0.0, 0.0, 0.0, "truth", "truth"),
        )


def scrape_run(truth: Truth, window_s: float, seed: int = 100) -> list[Point]:
    """Run the truth at its current limits for `window_s` virtual seconds (after a warm-up of
    the same length); the scrapes of the second half, one a virtual second."""
    points: list[Point] = []
    renderer: list[MetricsRenderer] = []

    def observe(t: float, engine: Engine, ctl: AdmissionController | None) -> None:
        if not renderer:
            renderer.append(MetricsRenderer(engine, "truth", 0.0))
        if t < window_s:
            return
        samples = promtext.parse(renderer[0].render(), _KEEP)
        points.append(point(t, samples, ctl.stats() if ctl is not None else None))

    predict(
        truth.calibration(),
        Candidate("scrape", truth.limits),
        horizon_s=window_s,
        warmup_s=window_s,
        seed=seed,
        expected_count=False,
        observer=observe,
    )
    return points


def measure(truth: Truth, cap: int, horizon_s: float, warmup_s: float, seed: int) -> Prediction:
    """What the known engine does at `cap` (the figure a prediction is judged against)."""
    limits = replace(truth.limits, max_concurrency=cap)
    return predict(
        truth.calibration(limits),
        Candidate(f"cap {cap}", limits),
        horizon_s=horizon_s,
        warmup_s=warmup_s,
        seed=seed,
        expected_count=False,
    )
