"""The autopilot's constants, one place: the benchmark runs their defaults on every workload
untuned, and docs/autopilot.md names each."""

from __future__ import annotations

from dataclasses import dataclass

from llmtop.core.base.slo import SloSettings


@dataclass(frozen=True)
class AutopilotConfig:
    """Defaults are the product: the benchmark runs them on every workload untuned."""

    ttft_slo_s: float = SloSettings.ttft_s
    itl_slo_s: float = SloSettings.itl_s
    prefill_horizon_s: float = 0.4
    """The prefill budget is this many seconds of the engine's measured prefill rate: a newly
    admitted prompt waits at most about this long behind the others' prefill."""
    prefill_deadband: float = 0.25
    """The prefill budget moves only when its target drifted by this share: the rate swings
    with every batch, and each move is an event in the log people read."""
    kv_target: float = 0.92
    """The KV use the safe overcommit aims at (see `overcommit`)."""
    peak_use: float = 1.0
    """The KV use the predicted peak of the requests in flight may reach (admission's
    lifetimes: each grows from its prompt to its footprint over its predicted life): the
    whole cache, as vLLM itself admits; no margin for a spread, the trajectory being theirs."""
    held_gain: float = 0.2
    """Smoothing per step of blocks held per footprint block when it rises (the mix got
    heavier: be careful at once)..."""
    held_gain_down: float = 0.04
    """...and when it falls (lighter: allow more only slowly); the gauge swings with every
    prefill and finish."""
    grow: float = 0.02
    """The probe's step past the safe level, a share of the cache (at least one request)."""
    probe_every_s: float = 3.0
    """Seconds between probe steps: long enough for the step's effect to show."""
    good_rise: float = 1.02
    """A probe step is kept only if the level serves at least this multiple of the requests
    within the SLO per second that the level before it served: a step that does not help is
    taken back (on a plateau the lower level wins: the same goodput with less in the engine)."""
    period_finished: int = 10
    """A level is judged over at least this many finished requests (and probe_every_s): fewer
    are noise, whatever the engine's speed."""
    thrash: float = 0.5
    """Preemptions per request finished above which the engine is thrashing, for
    `thrash_ticks` scrapes in a row: back off."""
    thrash_felt: float = 0.5
    """...and only while users feel it: the engine's mean ITL past this share of the ITL SLO,
    or its TTFT p95 past this share of its TTFT limit. On the real vLLM's CPU engine a
    recompute takes ~0.1 s and straight served 98 % within the SLO while preempting 88 times;
    cutting there refused what it would have served (BENCHMARKS §24)."""
    thrash_ticks: int = 3
    """Scrapes in a row thrashing must last: a few preemptions in one step are not a storm."""
    cut: float = 0.9
    """On thrashing: this share of what was in flight, and a ceiling there..."""
    ease: float = 0.95
    """...on a mean ITL or engine TTFT over its SLO: this share of the budget, a ceiling at
    the budget."""
    ceiling_margin: float = 0.97
    ceiling_forget: float = 0.002
    """The ceiling rises by this share of the cache a step without trouble (~50 s for 10 %)."""
    min_share: float = 0.1
    max_share: float = 3.0
    hold_s: float = 5.0
    waiting_ticks: int = 1
    """Scrapes a queue inside the engine at a full cache must last to count: one (holding
    there at once serves more within the SLO than after 3: BENCHMARKS §17)."""
    slow_ticks: int = 3
    """Scrapes a mean ITL over the SLO must last to count: a long prompt's prefill stalls the
    decodes for a scrape or two by itself."""
    engine_ttft_share: float = 0.8
    room_use: float = 1.0
    """The engine's room (drive.room_blocks): newcomers of the mix are counted in while
    the predicted peak KV of them and those in flight stays within this share of the cache
    (0: off), the trajectories moved to the KV the engine reports held..."""
    room_spare_requests: float = 1.0
    """...plus this many requests of the mix: vLLM preempts its newest when the cache runs
    out, and one preempted at the peak resumes when the next one ends (BENCHMARKS §22)."""
    room_spare_below: float = 16.0
    """...on a cache of fewer than this many requests of the mix, where one request is a coarse
    step (6 % or more of it); on a larger one the spare only adds preemptions (BENCHMARKS §22)."""
    room_itl_factor: float = 1.5
    """Before a life is measured, lives are taken at this multiple of the engine's mean ITL
    per token (ITL grows with the batch a cold burst builds, so 1.0 overcommits it)."""
    deadband: float = 0.02
    """Moves smaller than this share of the cache, or half a request of the mix, are not made."""
