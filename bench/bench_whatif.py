"""How right is `llmtop whatif`? Its CPU cost, and its accuracy against the sim as ground truth.

1. CPU: `analyse` (calibrate + five candidates) on a scraped window, in CPU seconds.
2. Virtual (no sockets, seconds): a known sim profile behind the real admission code is scraped
   as /metrics and /admin/stats would be; the what-if calibrates on those scrapes only and
   predicts three caps; the known engine is then run at each cap with SEEDS different traffic
   seeds. Error = prediction vs the mean of the seeds; "truth spread" = the seeds' own range,
   the noise floor any prediction of one run faces.
3. With --real: the same over sockets. `llmtop sim` and `llmtop gateway` run as child processes,
   `llmtop.load.runner` offers Poisson traffic to the gateway; the what-if calibrates from /metrics
   and /admin/stats, predicts, then each cap is applied (PATCH /admin/limits) and measured
   (harness/whatif_verify.py). Several minutes, bounded.

    python bench/bench_whatif.py [--real] [--measure S] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.whatif_truth import Truth, measure, schedule_run, scrape_run, spread  # noqa: E402
from llmtop.core.derive.percentiles import percentile_linear as percentile  # noqa: E402
from llmtop.gateway.admission.limits import Limits  # noqa: E402
from llmtop.sim.profiles import get_profile  # noqa: E402
from llmtop.whatif.model.calibrate import Calibration  # noqa: E402
from llmtop.whatif.model.lengths import LengthDist  # noqa: E402
from llmtop.whatif.model.predict import Candidate, predict  # noqa: E402
from llmtop.whatif.model.scenario import State  # noqa: E402
from llmtop.whatif.service import Options, analyse, fit_window, state_of  # noqa: E402

SEEDS = (11, 12, 13, 14, 15)


@dataclass(frozen=True)
class Scenario:
    """A sim the predictor knows nothing about, and the traffic and caps to try on it."""

    name: str
    profile: str
    kv_tokens: int | None
    rate_per_s: float
    prompt_tokens: tuple[int, int]
    output_tokens: int
    start_cap: int
    caps: tuple[int, ...]
    queue_timeout_s: float = 10.0

    def truth(self) -> Truth:
        lo, hi = self.prompt_tokens
        return Truth(
            get_profile(self.profile),
            self.kv_tokens,
            self.rate_per_s,
            LengthDist(((lo - 1, hi),), (1.0,), 1.0, (lo + hi) / 2),
            LengthDist.fixed(self.output_tokens),
            Limits(self.start_cap, 128, self.queue_timeout_s),
        )

    def sim_args(self) -> list[str]:
        args = ["--profile", self.profile]
        if self.kv_tokens is not None:
            args += ["--kv-tokens", str(self.kv_tokens)]
        return args


SCENARIOS = (
    Scenario("h100-8b", "h100-8b", None, 2.0, (256, 1536), 256, 8, (4, 8, 16)),
    Scenario("seed-kv8000", "seed", 8000, 0.6, (512, 1024), 256, 4, (2, 4, 16)),
)


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.0%}"


def sec(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


# -- 1 and 2: virtual ---------------------------------------------------------------------------


def cpu_five(sc: Scenario, opts: Options) -> float:
    """CPU seconds of `analyse` with five candidates (current + four caps); best of three."""
    points = scrape_run(sc.truth(), 30.0)
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        a = analyse(points, replace(opts, caps=(2, 4, 8, 16)))
        best = min(best, time.process_time() - t0)
        assert len(a.predictions) == 5
    return best


CALIBRATION_SEEDS = (100, 101, 102)
STEADY = Options(from_now=False, warmup_s=30.0, horizon_s=120.0, band=False, replicas=2)
"""The virtual truth is run from empty to steady state, so the predictions are too."""


def virtual(sc: Scenario, window_s: float, horizon_s: float) -> None:
    """Three calibration windows (different traffic), each predicting every cap; the truth at
    each cap is the mean of SEEDS runs of the known engine."""
    print(
        f"**{sc.name}** (`llmtop sim {' '.join(sc.sim_args())}`, {sc.rate_per_s:g} req/s Poisson,"
        f" prompts {sc.prompt_tokens[0]}-{sc.prompt_tokens[1]}, {sc.output_tokens} out, queue"
        f" timeout {sc.queue_timeout_s:g} s; calibrated at cap {sc.start_cap} over"
        f" {window_s:.0f} s of simulated scrapes; truth: {horizon_s:.0f} s at each cap,"
        f" {len(SEEDS)} traffic seeds).\n"
    )
    print(
        "| window | arrivals seen (req/s) | fit error: tok/s, client TTFT p95 | cap |"
        " predicted TTFT p95 | true p95 | error | true spread | predicted tok/s | true tok/s |"
        " error | true spread | preempt/min predicted / true |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    truth: dict[int, tuple[list[float], list[float], float]] = {}
    for cap in sc.caps:
        runs = [measure(sc.truth(), cap, horizon_s, 30.0, s) for s in SEEDS]
        pre = sum(r.preemptions_per_min for r in runs) / len(runs)
        truth[cap] = (
            [r.ttft_client_p95_s or 0.0 for r in runs],
            [r.output_tok_per_s for r in runs],
            pre,
        )
    for seed in CALIBRATION_SEEDS:
        a = analyse(scrape_run(sc.truth(), window_s, seed=seed), replace(STEADY, caps=sc.caps))
        o = a.observed
        fit = {c.name: c.error_frac for c in a.checks}
        head = (
            f"seed {seed} | {o.arrival_per_s:.2f} ± {o.arrival_error_per_s or 0:.2f} |"
            f" {pct(fit.get('output tok/s'))}, {pct(fit.get('client TTFT p95 (s)'))}"
        )
        for p in a.predictions[1:]:
            assert p.candidate.limits is not None
            cap = p.candidate.limits.max_concurrency
            ttfts, toks, pre = truth[cap]
            t_mean, k_mean = sum(ttfts) / len(ttfts), sum(toks) / len(toks)
            pt = p.ttft_client_p95_s
            print(
                f"| {head} | {cap} | {sec(pt)} | {sec(t_mean)} |"
                f" {pct((pt - t_mean) / t_mean if pt else None)} |"
                f" {sec(min(ttfts))}-{sec(max(ttfts))} | {p.output_tok_per_s:,.0f} |"
                f" {k_mean:,.0f} | {pct((p.output_tok_per_s - k_mean) / k_mean)} |"
                f" {min(toks):,.0f}-{max(toks):,.0f} | {p.preemptions_per_min:,.0f} / {pre:,.0f} |"
            )
            head = " | |"
    print()


# -- 2b: virtual, from the state at each change (the sockets procedure, no sockets) -----------

CHANGE_SEEDS = (1, 2, 3, 4, 5)


def virtual_changes(sc: Scenario, window_s: float, measure_s: float) -> None:
    """verify.py's schedule in virtual time, for several traffic seeds: calibrate over the
    window, then per cap predict from the scrape right before its change and measure what the
    known engine does. Also: the known engine itself predicting from the same scrape (how much
    the state and the traffic's own noise leave, with a perfect fit), and the state as it was
    read before this branch (queue ages estimated as queued / rate, every request at the engine
    prefilled anew)."""
    settle, tail = 10.0, sc.queue_timeout_s + 2.0
    print(
        f"**{sc.name}** from the state at each change ({len(CHANGE_SEEDS)} traffic seeds;"
        f" calibrated at cap {sc.start_cap} over {window_s:.0f} s, then caps"
        f" {', '.join(map(str, sc.caps))} in turn, each measured over {measure_s:.0f} s after"
        f" {settle:.0f} s).\n"
    )
    print(
        "| seed | cap | at the change: engine / queue (oldest) | predicted TTFT p95 |"
        " known engine from the scrape | measured | error | 10-90 % of one measurement |"
        " inside | predicted tok/s | measured | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    errs: dict[str, list[float]] = {"new": [], "old": [], "oracle": [], "tok": []}
    inside = 0
    total = 0
    for seed in CHANGE_SEEDS:
        points, runs = schedule_run(
            sc.truth(), sc.caps, warmup_s=15.0, window_s=window_s, settle_s=settle,
            measure_s=measure_s, tail_s=tail, seed=seed,
        )  # fmt: skip
        obs, cal = fit_window(points, Options())
        assert cal.limits is not None
        oracle = replace(sc.truth().calibration(), arrival_per_s=cal.arrival_per_s)
        for r in runs:
            cand = Candidate(f"cap {r.cap}", replace(cal.limits, max_concurrency=r.cap))
            st = state_of(r.before, cal.arrival_per_s, cal.limits)
            old = State(st.at_engine, st.queued, min(st.queued / cal.arrival_per_s, 10.0))

            def run(c: Calibration, state: State, cand: Candidate = cand) -> float | None:
                return predict(
                    c, cand, horizon_s=measure_s, warmup_s=settle, start=state, replicas=4
                ).ttft_client_p95_s

            pt, po, pk = run(cal, st), run(cal, old), run(oracle, st)
            p = predict(cal, cand, horizon_s=measure_s, warmup_s=settle, start=st, replicas=4)
            band = spread(
                cal, cand, rate_error_per_s=obs.arrival_error_per_s or 0.0,
                horizon_s=measure_s, warmup_s=settle, start=st,
            )  # fmt: skip
            m = r.measured
            mt = m.ttft_client_p95_s
            ok = band.holds_ttft(mt)
            inside += bool(ok)
            total += 1
            if mt and pt and po and pk:
                errs["new"].append(abs(pt - mt) / mt)
                errs["old"].append(abs(po - mt) / mt)
                errs["oracle"].append(abs(pk - mt) / mt)
            errs["tok"].append(abs(p.output_tok_per_s - m.output_tok_per_s) / m.output_tok_per_s)
            lo, hi = band.ttft_p95_s or (0.0, 0.0)
            print(
                f"| {seed} | {r.cap} | {st.at_engine} / {st.queued} ({sec(st.oldest_wait_s)}) |"
                f" {sec(pt)} | {sec(pk)} | {sec(mt)} |"
                f" {pct((pt - mt) / mt if pt and mt else None)} |"
                f" {sec(lo)}-{sec(hi)} | {'yes' if ok else 'no'} | {p.output_tok_per_s:,.0f} |"
                f" {m.output_tok_per_s:,.0f} |"
                f" {pct((p.output_tok_per_s - m.output_tok_per_s) / m.output_tok_per_s)} |"
            )

    def med(xs: list[float]) -> str:
        v = percentile(xs, 50)
        return "n/a" if v is None else f"{v:.0%}"

    print(
        f"\nMedian |error| over the {total} caps: TTFT p95 {med(errs['new'])} (the state as read"
        f" before this branch: {med(errs['old'])}; the known engine from the same scrape:"
        f" {med(errs['oracle'])}), tok/s {med(errs['tok'])}; measured inside the 10-90 % range"
        f" of one measurement: {inside} of {total}.\n"
    )


def state_check(sc: Scenario, seeds: int, measure_s: float) -> None:
    """Is the state at a change seeded faithfully? The known engine (exact profile and rate)
    predicts from the scrape before a change into the backlog of a tighter cap (h100-8b: cap 4
    then 8; seed-kv8000: cap 4 then 16), as ten single traffic draws; over many seeds the
    truth's measurement should sit at a uniform rank among them and the means should agree. A
    bias here would be the seeding's, not the fit's."""
    first, cap = (4, 8) if sc.name == "h100-8b" else (4, 16)
    oracle = sc.truth().calibration()
    assert oracle.limits is not None
    cand = Candidate(f"cap {cap}", replace(oracle.limits, max_concurrency=cap))
    truths: list[float] = []
    means: list[float] = []
    ranks: list[float] = []
    for seed in range(10, 10 + seeds):
        _, runs = schedule_run(
            sc.truth(), (first, cap), warmup_s=15.0, window_s=60.0, settle_s=10.0,
            measure_s=measure_s, tail_s=sc.queue_timeout_s + 2.0, seed=seed,
        )  # fmt: skip
        r = runs[1]
        st = state_of(r.before, oracle.arrival_per_s, oracle.limits)
        draws = [
            predict(
                oracle, cand, horizon_s=measure_s, warmup_s=10.0, start=st, seed=k,
                expected_count=False,
            ).ttft_client_p95_s or 0.0
            for k in range(10)
        ]  # fmt: skip
        t = r.measured.ttft_client_p95_s or 0.0
        truths.append(t)
        means.append(sum(draws) / len(draws))
        ranks.append(sum(1 for d in draws if d < t) / len(draws))
    n = len(truths)
    print(
        f"**{sc.name}**, cap {first} -> {cap}, {n} seeds: measured TTFT p95 mean"
        f" {sec(sum(truths) / n)} (range {sec(min(truths))}-{sec(max(truths))}), the known"
        f" engine from the scrape {sec(sum(means) / n)}; the measurement's mean rank among ten"
        f" draws {sum(ranks) / n:.2f} (0.5 = unbiased); below all ten"
        f" {sum(1 for x in ranks if x < 0.1)} of {n} (1 in 11 expected), above nine or more"
        f" {sum(1 for x in ranks if x >= 0.9)} of {n} (2 in 11 expected).\n"
    )


# -- 3: real time over sockets ------------------------------------------------------------------


def real(sc: Scenario, phases_kw: dict[str, float]) -> None:
    from harness.whatif_verify import Phases, Traffic, serve_stack, verify

    phases = Phases(**phases_kw)
    traffic = Traffic(sc.rate_per_s, sc.prompt_tokens, sc.output_tokens, seed=1)
    gw_args = ["--max-concurrency", str(sc.start_cap), "--queue-timeout-s", str(sc.queue_timeout_s)]
    with serve_stack(sc.sim_args(), gw_args) as (sim, gw):
        t0 = time.monotonic()
        analysis, rows = asyncio.run(verify(sim, gw, sc.caps, traffic, phases, Options()))
        took = time.monotonic() - t0
    checks = ", ".join(f"{c.name} {pct(c.error_frac)}" for c in analysis.checks)
    o = analysis.observed
    checks += f"; arrivals {o.arrival_per_s:.2f} ± {o.arrival_error_per_s or 0:.2f} req/s"
    print(f"**{sc.name}** over sockets ({took:.0f} s wall; calibrated at cap {sc.start_cap} over"
          f" {phases.window_s:.0f} s; each cap measured over {phases.measure_s:.0f} s after"
          f" {phases.settle_s:.0f} s). Fit error: {checks}.\n")  # fmt: skip
    print("| cap | predicted TTFT p95 | measured | error | predicted tok/s | measured | error |"
          " requests measured (their Poisson noise) | 429s predicted / measured |"
          " at the change: engine / gateway queue | 10-90 % of one measurement |"
          " inside |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, m = r.predicted, r.measured
        rej = f"{p.rejected / p.offered:.0%}" if p.offered else "n/a"
        mrej = f"{m.rejected / m.offered:.0%}" if m.offered else "n/a"
        noise = f"±{1 / m.offered**0.5:.0%}" if m.offered else "n/a"
        lo, hi = r.spread.ttft_p95_s or (None, None)
        print(
            f"| {m.cap} | {sec(p.ttft_client_p95_s)} | {sec(m.ttft_p95_s)} |"
            f" {pct(r.ttft_p95_error)} | {p.output_tok_per_s:,.0f} | {m.output_tok_per_s:,.0f} |"
            f" {pct(r.tok_error)} | {m.offered} ({noise}) | {rej} / {mrej} |"
            f" {r.start.at_engine} / {r.start.queued} | {sec(lo)}-{sec(hi)} |"
            f" {'yes' if r.spread.holds_ttft(m.ttft_p95_s) else 'no'} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", action="store_true", help="also run over sockets (minutes)")
    parser.add_argument("--no-virtual", action="store_true")
    parser.add_argument("--scenario", choices=[s.name for s in SCENARIOS], action="append")
    parser.add_argument("--window", type=float, default=30.0, help="calibration window (s)")
    parser.add_argument("--measure", type=float, default=40.0, help="real: seconds per cap")
    parser.add_argument("--horizon", type=float, default=120.0, help="virtual truth horizon")
    parser.add_argument(
        "--changes", action="store_true", help="also the virtual schedule from each change"
    )
    parser.add_argument(
        "--state-check", type=int, default=0, metavar="SEEDS", help="the seeding's bias check"
    )
    args = parser.parse_args()
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    print("## What-if accuracy (bench/bench_whatif.py)\n")
    plain = cpu_five(SCENARIOS[0], Options(band=False))
    banded = cpu_five(SCENARIOS[0], Options())
    print(
        "CPU of `analyse` (calibration + 5 candidates: the current cap and caps 2, 4, 8, 16;"
        f" the command's defaults, 60 s from now), {SCENARIOS[0].name} at"
        f" {SCENARIOS[0].rate_per_s:g} req/s, best of 3: {plain:.2f} CPU s;"
        f" with the arrival-rate band (two more runs a candidate): {banded:.2f} CPU s.\n"
    )
    if not args.no_virtual:
        print("### Virtual time: calibrated from scraped /metrics, against the known engine\n")
        for sc in chosen:
            virtual(sc, args.window, args.horizon)
    if args.changes:
        print("### Virtual time, from the state at each change\n")
        for sc in chosen:
            virtual_changes(sc, args.window, args.measure)
    if args.state_check:
        print("### Virtual time: is the state at the change seeded faithfully?\n")
        for sc in chosen:
            state_check(sc, args.state_check, args.measure)
    if args.real:
        print("### Over sockets: `llmtop sim` + `llmtop gateway` + `llmtop.load.runner`\n")
        for sc in chosen:
            real(sc, {"window_s": args.window, "measure_s": args.measure,
                      "tail_s": sc.queue_timeout_s + 2.0})  # fmt: skip


if __name__ == "__main__":
    main()
