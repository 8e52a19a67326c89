"""An observed window -> the engine model's inputs: a fitted profile, its KV, the workload. Pure.

The step time's four constants are fitted from metrics alone (no step timing is exported) into a
synthetic `Profile` (efficiencies 1) that the real engine model runs; the method: docs/whatif.md.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from llmtop.core.base.admin_api import LIMIT_FIELDS
from llmtop.errors import LimitError
from llmtop.gateway.admission.limits import Limits, validate_limits
from llmtop.sim.config import EngineConfig
from llmtop.sim.profiles import Profile
from llmtop.whatif.model.lengths import LengthDist
from llmtop.whatif.model.window import Observed

OVERHEAD_SHARE = 0.35
"""Fixed step overhead as a share of the decode floor (0.32 on h100-8b, 0.41 on seed)."""
PRIOR_WEIGHT_TOKENS = 115_000.0
"""Weight bytes / KV bytes per token: 16 GB / 128 KiB for Llama-3-8B, 14 GB / 128 KiB for 7B."""
PRIOR_RIDGE_TOKENS = 230.0
"""Tokens per step where compute catches up with the weight reads (H100 ~216, A10-class ~257)."""
_LAYERS, _KV_HEADS, _HEAD_DIM, _HEADS = 32, 8, 128, 32
"""The synthetic model's shape (only ratios matter: KV bytes per token, attention FLOPs)."""
MIN_ITL_OBS = 20.0
"""An interval with fewer ITL observations is too thin to fit on."""


@dataclass(frozen=True)
class StepFit:
    """The fitted step-time constants, in seconds."""

    overhead_s: float
    weights_s: float
    kv_s_per_token: float
    prefill_s_per_token: float
    slope_from: str
    """"fit" or "prior" (too little spread in KV use)."""
    prefill_from: str
    """"fit" or "prior" (prefills hidden under the decode floor, or no prefill histogram)."""

    @property
    def decode_floor_s(self) -> float:
        return self.overhead_s + self.weights_s


@dataclass(frozen=True)
class Calibration:
    """Everything the predictor needs, all from the window."""

    profile: Profile
    kv_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    arrival_per_s: float
    prompt_len: LengthDist
    output_len: LengthDist
    limits: Limits | None
    """The gateway's current limits; None when no gateway was read."""
    fit: StepFit
    notes: list[str] = field(default_factory=list)
    frontend_s: float = 0.0
    """Seconds from a request being sent to the engine until its scheduler has it, plus the
    first token's way back: vLLM's TTFT less its queue time less its prefill time (the API
    server's tokenising and IPC, which the step-time model does not hold). Mean, per request."""

    def engine_config(self) -> EngineConfig:
        return EngineConfig.from_profile(
            self.profile,
            kv_tokens=self.kv_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens,
        )


def _limits(d: dict[str, object] | None, notes: list[str]) -> Limits | None:
    """The gateway's limits from /admin/stats, or None when absent or not understood."""
    if d is None:
        return None
    try:
        limits = validate_limits(
            Limits(max_concurrency=1, max_queue=0, queue_timeout_s=1.0),
            {k: d[k] for k in LIMIT_FIELDS if k in d},
        )
    except LimitError as e:
        notes.append(f"gateway limits not understood ({e.message}): predicted without them")
        return None
    if limits.rate_limit_rpm is not None:
        notes.append("the gateway's per-tenant rate limit is not modelled (left off)")
        limits = replace(limits, rate_limit_rpm=None)
    if limits.mode == "auto":
        notes.append(
            "autopilot on: its KV and prefill budgets are held where they are now, not moved"
        )
    return limits


def calibrate(
    obs: Observed,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int | None = None,
) -> Calibration:
    """Fit the step time and gather the workload; UsageError-free: gaps become priors + notes."""
    notes = list(obs.notes)
    budget = max_num_batched_tokens
    if budget is None:
        budget = int(max(2048.0, obs.max_step_tokens or 0.0))
        notes.append(
            f"max_num_batched_tokens assumed {budget} (from the tokens-per-step histogram)"
        )
    prompt = obs.prompt_len or LengthDist.fixed(512)
    output = obs.output_len or LengthDist.fixed(128)
    if obs.prompt_len is None or obs.output_len is None:
        notes.append("no finished requests: lengths assumed 512 in, 128 out")
    fit = fit_step(obs, prompt, budget)
    if fit.slope_from == "prior":
        notes.append("KV slope from a prior (too little spread in KV use over the window)")
    if fit.prefill_from == "prior":
        notes.append("prefill cost from a prior (prefills hidden under the decode step)")
    kv = obs.kv_capacity_tokens
    limits = _limits(obs.gateway_limits, notes)
    frontend = frontend_overhead(obs)
    return Calibration(
        profile=synthetic_profile(fit, obs.block_size, kv),
        kv_tokens=kv,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(budget, max_num_seqs),
        max_model_len=kv,
        arrival_per_s=obs.arrival_per_s,
        prompt_len=prompt,
        output_len=output,
        limits=limits,
        fit=fit,
        notes=notes,
        frontend_s=frontend,
    )


FRONTEND_MIN_SHARE = 0.05
"""A front-end share of the engine TTFT below this is left at 0 (within the histograms' noise)."""


def frontend_overhead(obs: Observed) -> float:
    """vLLM's mean TTFT less its mean queue time and mean prefill time: what happens outside
    the scheduler's steps (tokenising, the API server's IPC; on the CPU backend it competes with
    the engine for cores). 0 when not exported, or a small share of the TTFT."""
    ttft, queue, prefill = obs.ttft_mean_s, obs.queue_time_mean_s, obs.prefill_mean_s
    if ttft is None or queue is None or prefill is None or ttft <= 0:
        return 0.0
    gap = ttft - queue - prefill
    return gap if gap > FRONTEND_MIN_SHARE * ttft else 0.0


def fit_step(obs: Observed, prompt: LengthDist, budget: int) -> StepFit:
    """Decode floor and KV slope from the intervals' ITL; prefill cost from the prefill time."""
    rows: list[tuple[float, float, float]] = []  # (kv tokens, corrected decode step, weight)
    for iv in obs.intervals:
        if iv.itl_mean_s is None or iv.itl_count < MIN_ITL_OBS or iv.kv_tokens is None:
            continue
        d = iv.itl_mean_s
        steps = iv.steps if iv.steps else iv.dt_s / d
        share = min(0.9, iv.prefills / steps) if steps > 0 else 0.0
        pf = iv.prefill_mean_s
        if pf is not None and pf > d and share > 0:
            d = (d - share * pf) / (1.0 - share)
        if d > 0:
            rows.append((iv.kv_tokens, d, iv.itl_count))
    if not rows and obs.itl_mean_s is not None:
        rows.append((obs.running_mean, obs.itl_mean_s, 1.0))
    if not rows:
        floor, slope, slope_from = 0.02, 0.02 / PRIOR_WEIGHT_TOKENS, "prior"
    else:
        floor, slope, slope_from = _line(rows)
    overhead = OVERHEAD_SHARE * floor
    weights = floor - overhead
    prefill_c, prefill_from = _fit_prefill(obs, prompt, budget, overhead, weights, slope)
    return StepFit(overhead, weights, slope, prefill_c, slope_from, prefill_from)


def _line(rows: list[tuple[float, float, float]]) -> tuple[float, float, str]:
    """Weighted least squares d = F + k x kv; the prior slope when kv hardly varies."""
    wsum = sum(w for _, _, w in rows)
    mx = sum(x * w for x, _, w in rows) / wsum
    my = sum(y * w for _, y, w in rows) / wsum
    sxx = sum(w * (x - mx) ** 2 for x, _, w in rows) / wsum
    sxy = sum(w * (x - mx) * (y - my) for x, y, w in rows) / wsum
    spread = math.sqrt(sxx) / mx if mx > 0 else 0.0
    if len(rows) >= 4 and spread > 0.25 and sxy > 0:
        k = sxy / sxx
        f = my - k * mx
        if f > 0 and k * mx < 4 * f:
            return f, k, "fit"
    # The prior: k = F / PRIOR_WEIGHT_TOKENS, so my = F (1 + mx / PRIOR_WEIGHT_TOKENS).
    f = my / (1.0 + mx / PRIOR_WEIGHT_TOKENS)
    return f, f / PRIOR_WEIGHT_TOKENS, "prior"


def _prefill_step(
    c: float, n: int, decoders: int, budget: int, overhead: float, floor_mem: float, attn: float
) -> float:
    """The model's time from first schedule to first token of an n-token prompt, with
    `decoders` decode tokens in each step and `attn` seconds per attention pair per c."""
    total = 0.0
    done = 0
    room = max(1, budget - decoders)
    while done < n:
        chunk = min(room, n - done)
        compute = c * (chunk + decoders) + c * attn * chunk * (done + 0.5 * chunk)
        total += overhead + max(compute, floor_mem)
        done += chunk
    return total


def _fit_prefill(
    obs: Observed, prompt: LengthDist, budget: int, overhead: float, weights: float, slope: float
) -> tuple[float, str]:
    """Seconds per prefill token so the model's mean prefill step matches the observed mean."""
    attn = 2.0 * _LAYERS * _HEADS * _HEAD_DIM / _params(weights, slope)
    prior = weights / PRIOR_RIDGE_TOKENS
    observed = obs.prefill_mean_s
    if observed is None:
        return prior, "prior"
    sampler = prompt.sampler(random.Random(7))
    lengths = [sampler.draw() for _ in range(200)]
    known = [iv.kv_tokens for iv in obs.intervals if iv.kv_tokens is not None]
    kv = sum(known) / max(1, len(known))
    floor_mem = weights + slope * kv
    decoders = int(max(0.0, obs.running_mean - 1.0))

    def mean_step(c: float) -> float:
        return sum(
            _prefill_step(c, n, decoders, budget, overhead, floor_mem, attn) for n in lengths
        ) / len(lengths)

    floor = mean_step(0.0)
    if observed <= floor * 1.05:
        # Prefills fit under the decode floor: only an upper bound on c is visible.
        return min(prior, _bisect(mean_step, floor * 1.05)), "prior"
    return _bisect(mean_step, observed), "fit"


def _params(weights_s: float, kv_s: float) -> float:
    """Parameters of the synthetic model: weight bytes / 2, with its KV bytes per token."""
    return weights_s * _kv_bytes_per_token() / kv_s / 2.0


def _bisect(fn: Callable[[float], float], target: float, hi: float = 1.0) -> float:
    """The c in (1e-9, hi] where the increasing `fn` reaches `target` (bisection on log c)."""
    lo_l, hi_l = math.log(1e-9), math.log(hi)
    if fn(hi) < target:
        return hi
    for _ in range(40):
        mid = 0.5 * (lo_l + hi_l)
        if fn(math.exp(mid)) < target:
            lo_l = mid
        else:
            hi_l = mid
    return math.exp(0.5 * (lo_l + hi_l))


def _kv_bytes_per_token() -> int:
    return 2 * _LAYERS * _KV_HEADS * _HEAD_DIM * 2


def synthetic_profile(fit: StepFit, block_size: int, kv_tokens: int) -> Profile:
    """A profile whose engine-model coefficients are exactly the fitted ones (efficiencies 1)."""
    bandwidth = _kv_bytes_per_token() / fit.kv_s_per_token
    params = _params(fit.weights_s, fit.kv_s_per_token)
    flops = 2.0 * params / fit.prefill_s_per_token
    return Profile(
        name="whatif-fit",
        description="fitted from the live engine's /metrics by llmtop whatif",
        gpu_name="fitted",
        gpu_memory_bytes=0,
        bandwidth_bytes_per_s=bandwidth,
        flops_per_s=flops,
        params=params,
        layers=_LAYERS,
        kv_heads=_KV_HEADS,
        head_dim=_HEAD_DIM,
        heads=_HEADS,
        dtype_bytes=2,
        kv_tokens=kv_tokens,
        bandwidth_efficiency=1.0,
        flops_efficiency=1.0,
        step_overhead_s=fit.overhead_s,
        block_size=block_size,
        max_model_len=kv_tokens,
    )
