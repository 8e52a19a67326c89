"""The autopilot on other engines: goodput with the autopilot against no gateway, with the sim's
/metrics spoken as vLLM, SGLang, TensorRT-LLM and llama.cpp, side by side in one run, in virtual
time (deterministic; bench/bench_autopilot.py's run, with `DIALECT` set).

The engine underneath is the same `seed` sim; only what the autopilot reads of it differs:
vLLM's KV cache, SGLang's token pool (KV in tokens), TensorRT-LLM's KV cache (no preemption
count), llama.cpp's slots (no KV figure; the sim
capped at `--slots` running, as `llama-server -np N` is) and the TTFT the gateway measures.
Poisson arrivals of 500/350 at each load of the engine's own hindsight capacity, as the grid
runs them (2 minutes of arrivals or 240 requests, whichever is longer), `--seeds` seeds a load;
goodput as in BENCHMARKS.md (TTFT <= 5 s from arrival, mean ITL <= 100 ms, of the offered
requests); the median over the seeds, and each seed's.

    python bench/bench_autopilot_engines.py [--seeds 3] [--slots 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_autopilot as ba

from llmtop.sim.profiles import PROFILES

LOADS = (1.0, 1.3, 2.0, 3.0)
SHAPE: ba.Shape = (500, 350)


def slots_profile(slots: int, folder: Path) -> str:
    """The `seed` profile running at most `slots` requests at once (llama-server -np N), as a
    JSON file bench_autopilot's --profile reads."""
    fields = dataclasses.asdict(PROFILES["seed"])
    fields |= {"name": f"seed-{slots}-slots", "max_num_seqs": slots}
    path = folder / f"seed-{slots}-slots.json"
    path.write_text(json.dumps(fields))
    return str(path)


def arm(dialect: str, profile: str) -> None:
    ba.DIALECT[0], ba.PROFILE[0] = dialect, profile


def runs(
    dialect: str, profile: str, seeds: int
) -> tuple[float, list[tuple[float, list[ba.Result]]]]:
    """The engine's capacity, and for each load the straight and autopilot results per seed."""
    arm(dialect, profile)
    mix: ba.Mix = ((1.0, SHAPE),)
    cap = ba.capacity(mix)
    out: list[tuple[float, list[ba.Result]]] = []
    for load in LOADS:
        results: list[ba.Result] = []
        for k in range(seeds):
            rng = random.Random(ba.SEED + 1000 * k + int(load * 10))
            rate = load * cap
            span = max(ba.GRID_S, ba.GRID_REQUESTS / rate)  # as the grid: a steady state
            reqs = ba.poisson(rng, lambda t: rate, rate, span, mix)  # noqa: B023
            w = ba.Workload(f"{load:g}x", f"{load:g}x", reqs, min(1.0, 1 / load))
            results += [ba.run(w, ba.POLICIES[0]), ba.run(w, ba.POLICIES[-1])]
        out.append((load, results))
    return cap, out


def first_reason(results: list[ba.Result]) -> str:
    """The autopilot's first move that is not the prefill budget's: how it read the engine."""
    for r in results:
        for m in r.moves:
            if not m.startswith(("prefill budget", "autopilot on", "no KV figure")):
                return m
    return "(no move)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=8, help="llama.cpp's slots (-np)")
    args = parser.parse_args()
    t0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        engines = [
            ("vLLM", "vllm", "seed"),
            ("SGLang", "sglang", "seed"),
            ("TensorRT-LLM", "trtllm", "seed"),
            (f"llama.cpp, {args.slots} slots", "llamacpp", slots_profile(args.slots, Path(tmp))),
        ]
        print(
            f"#### The autopilot on other engines: Poisson {SHAPE[0]}/{SHAPE[1]} on `seed`,"
            f" 2 minutes of arrivals or 240 requests a run, {args.seeds} seeds a load\n"
        )
        print(
            "| engine (what the autopilot reads) | capacity | load | goodput straight, median"
            " | autopilot, median | each seed straight -> autopilot | 429s, median |"
            f" of them served in time straight, {args.seeds} seeds summed |"
            " output / straight, median |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        reasons: list[str] = []
        for name, dialect, profile in engines:
            cap, by_load = runs(dialect, profile, args.seeds)
            for load, results in by_load:
                straight, pilot = results[0::2], results[1::2]
                good_s = [r.goodput for r in straight]
                good_a = [r.goodput for r in pilot]
                each = ", ".join(f"{s:.0%}->{a:.0%}" for s, a in zip(good_s, good_a, strict=True))
                refused = [
                    sum(x.outcome in ("rejected", "timed_out") for x in r.recs) for r in pilot
                ]
                needless = sum(ba.needless(a, s) for a, s in zip(pilot, straight, strict=True))
                ratio = statistics.median(
                    a.tok_s / s.tok_s for a, s in zip(pilot, straight, strict=True) if s.tok_s
                )
                print(
                    f"| {name} | {cap:.2f} req/s | {load:g}x | {statistics.median(good_s):.0%} |"
                    f" **{statistics.median(good_a):.0%}** | {each} |"
                    f" {statistics.median(refused):g} | {needless} | {ratio:.2f}x |"
                )
            reasons.append(f"{name}: {first_reason([r for _, rs in by_load for r in rs[1::2]])}")
        print("\nThe autopilot's first move on each (how it read the engine):\n")
        for line in reasons:
            print(f"* {line}")
    print(f"\n{time.process_time() - t0:.0f} CPU s in all.")


if __name__ == "__main__":
    main()
