"""The figures of docs/sim.md in virtual time: profiles, calibration, figure 4, `fast`'s steps.

python bench/sim_figures.py      # a few CPU seconds; prints the figures
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.sim_virtual import Burst, run_burst  # noqa: E402
from llmtop.sim.model import Engine, EngineConfig, Sequence  # noqa: E402
from llmtop.sim.profiles import PROFILES, get_profile  # noqa: E402


def engine(profile: str) -> Engine:
    return Engine(EngineConfig.from_profile(get_profile(profile)))


def decode_rate(seq: Sequence) -> float:
    """Tokens per second after the first one (as tests/unit/test_sim_calibration.py)."""
    assert seq.finished_s is not None
    assert seq.first_token_s is not None
    return (seq.num_output - 1) / (seq.finished_s - seq.first_token_s)


def aggregate(profile: str, n: int) -> tuple[float, int]:
    """Aggregate tok/s (tokens / makespan) of n 512+256 requests, and the preemptions."""
    eng = engine(profile)
    done = run_burst(eng, Burst(n, 512, 256))
    makespan = max(s.finished_s or 0.0 for s in done)
    return sum(s.num_output for s in done) / makespan, eng.stats.num_preemptions


def main() -> None:
    print("| profile | KV tokens | max_model_len | 1 stream tok/s | 64 streams | preempted |")
    for name in PROFILES:
        cfg = EngineConfig.from_profile(get_profile(name))
        one = decode_rate(run_burst(engine(name), Burst(1, 512, 256))[0])
        agg, pre = aggregate(name, 64)
        row = [name, f"{cfg.kv_tokens:,}", f"{cfg.max_model_len:,}", f"{one:.1f}", f"{agg:,.0f}"]
        print("| " + " | ".join([*row, str(pre)]) + " |")

    eng = engine("seed")
    burst = run_burst(eng, Burst(32, 4000, 256))
    worst = max(s.ttft_s or 0.0 for s in burst)
    pre = eng.stats.num_preemptions
    print(f"seed, 32 x 4,000+256: largest TTFT {worst:.1f} s, {pre} preemptions")
    lone = run_burst(engine("seed"), Burst(1, 4000, 256))[0].ttft_s or 0.0
    capped = run_burst(engine("seed"), Burst(32, 4000, 256), max_at_engine=8)
    later = [s.ttft_s or 0.0 for s in capped if s.arrival_s > 0]
    worst_capped = max(s.ttft_s or 0.0 for s in capped)
    print(
        f"capped at 8: worst engine TTFT {worst_capped:.2f} s ({worst / worst_capped:.0f}x lower), "
        f"later {len(later)} within {max(later) / lone:.3f}x the lone {lone:.3f} s"
    )

    fast = engine("fast")
    for _ in range(16):
        fast.add_request(64, 256)
    while any(s.num_output == 0 for s in fast.running) or fast.waiting:
        fast.step()
    t0, steps = fast.now, 0
    while steps < 100:
        fast.step()
        steps += 1
    step_s = (fast.now - t0) / steps
    rate = 16 / step_s
    ms = step_s * 1e3
    print(f"fast: 16 streams of 64-token prompts: decode step {ms:.2f} ms ({rate:,.0f} tok/s)")
    fast = engine("fast")
    fast.add_request(2047, 1)
    t0 = fast.now
    while fast.has_work():
        fast.step()
    print(f"fast: 2,047-token prefill {(fast.now - t0) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
