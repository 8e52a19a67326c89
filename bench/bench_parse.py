"""Parse + derive time per scrape of the real vLLM 0.32 capture, against prometheus_client alone.

Three timings over the same text in the same run (tests/fixtures/metrics-load.txt, 53 KB):
  plain     prometheus_client.parser.text_string_to_metric_families over the whole text
  filtered  llmtop.core.promtext.parse (drops unread families before parsing)
  full      filtered parse + extract + the Pipeline update (rates, quantiles, health rules)
Also the unfiltered promtext parse, to show what the pre-filter saves. Medians of many repeats;
this box is noisy, so compare the ratios, not the absolute figures.

    python bench/bench_parse.py [--repeat 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from llmtop.core import engines, promtext
from llmtop.core.pipeline import Pipeline
from llmtop.core.raw import RawEngine, RawPoll
from llmtop.settings import HealthSettings

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics-load.txt"
KEEP = promtext.keep_names(engines.sample_names())


def median_us(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of one call, in microseconds (after a short warm-up)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    text = FIXTURE.read_text()

    def plain() -> object:
        return [s for fam in text_string_to_metric_families(text) for s in fam.samples]

    def unfiltered() -> object:
        return promtext.parse(text)

    def filtered() -> object:
        return promtext.parse(text, KEEP)

    pipeline = Pipeline(HealthSettings())
    clock = [0.0]

    def full() -> object:
        clock[0] += 1.0
        samples = promtext.parse(text, KEEP)
        return pipeline.update(RawPoll(time=clock[0], engines=(RawEngine("u", samples),)))

    rows = [
        ("prometheus_client plain parse (baseline)", median_us(plain, args.repeat)),
        ("promtext.parse, no filter", median_us(unfiltered, args.repeat)),
        ("promtext.parse, filtered", median_us(filtered, args.repeat)),
        ("filtered parse + derive + health (Pipeline.update)", median_us(full, args.repeat)),
    ]
    base = rows[0][1]
    kept = len(promtext.parse(text, KEEP))
    total = len(unfiltered())  # type: ignore[arg-type]
    print("## Parse + derive per scrape (bench/bench_parse.py)\n")
    print(
        f"Input: {FIXTURE.name}, {len(text.encode()):,} bytes, {total} samples "
        f"({kept} kept by the filter); median of {args.repeat} runs.\n"
    )
    print("| step | median | vs plain parse |")
    print("|---|---:|---:|")
    for name, us in rows:
        print(f"| {name} | {us / 1000:.2f} ms | {us / base:.2f}x |")


if __name__ == "__main__":
    main()
