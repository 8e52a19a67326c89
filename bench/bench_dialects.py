"""Per-scrape cost of reading each engine's dialect against vLLM's, side by side in one run.

Each engine's own /metrics fixture (tests/fixtures/engines/, tests/fixtures/metrics-load.txt for
vLLM 0.32) is read as the monitor reads a scrape: `promtext.parse` with the monitor's keep-list
(every dialect's names, `sources.vllm.VLLM_KEEP`), then one `Pipeline.update` (the dialect
detected and translated to vLLM's names, `catalog.extract`, then rates, quantiles and the
rules). Two cases per engine, interleaved round by round with every other engine's so that
load from other processes hits them alike; medians of `--repeat` rounds, in microseconds:

  same   the same text every round (the parser's memo and the detection cache warm: an idle
         engine)
  fresh  a new text every round, every counter, sum, count and bucket advanced (no kept line
         but the gauges seen before: the worst case)

and `x vLLM`, the fresh cost over vLLM's. The fixtures differ in size (vLLM's capture is 53 KB,
llama.cpp's 2 KB): the cost of a dialect is its translation, a few microseconds a scrape.

    python bench/bench_dialects.py [--repeat 300]
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

from bench_parse import medians_us

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.exposition import promtext
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.settings import HealthSettings
from llmtop.sources.vllm import VLLM_KEEP

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ENGINES = {
    "vllm": FIXTURES / "metrics-load.txt",
    "sglang": FIXTURES / "engines" / "sglang" / "metrics-definitions-0.5.2-load.txt",
    "trtllm": FIXTURES / "engines" / "trtllm" / "metrics-definitions-050f80de-load.txt",
    "lmdeploy": FIXTURES / "engines" / "lmdeploy" / "metrics-definitions-0.18.0-load.txt",
    "llamacpp": FIXTURES / "engines" / "llamacpp" / "metrics-burst.txt",
    "tgi": FIXTURES / "engines" / "tgi" / "metrics-definitions-load.txt",
    "dynamo": FIXTURES / "engines" / "dynamo" / "metrics-load.txt",
}
_COUNTING = re.compile(
    r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:_total|_sum|_count|_bucket)(?:\{[^}]*\})?) (\S+)$", re.M
)


def advanced(text: str, k: int) -> str:
    """`text` with every counter, sum, count and bucket k steps on (k per line, so buckets
    stay cumulative)."""

    def step(m: re.Match[str]) -> str:
        try:
            return f"{m.group(1)} {float(m.group(2)) + k:g}"
        except ValueError:
            return m.group(0)

    return _COUNTING.sub(step, text)


def readers(kind: str, text: str, repeat: int) -> dict[str, Callable[[], object]]:
    """The engine's two cases, each a parse and one pipeline update a call."""
    same_pipe, fresh_pipe = Pipeline(HealthSettings()), Pipeline(HealthSettings())
    fresh = [advanced(text, k) for k in range(repeat + 10)]
    clock = {"same": 0, "fresh": 0}

    def same() -> object:
        clock["same"] += 1
        raw = RawEngine("http://" + kind, promtext.parse(text, VLLM_KEEP))
        return same_pipe.update(RawPoll(float(clock["same"]), (raw,)))

    def new() -> object:
        k = clock["fresh"] = clock["fresh"] + 1
        raw = RawEngine("http://" + kind, promtext.parse(fresh[k % len(fresh)], VLLM_KEEP))
        return fresh_pipe.update(RawPoll(float(k), (raw,)))

    return {f"{kind} same": same, f"{kind} fresh": new}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    texts = {kind: path.read_text() for kind, path in ENGINES.items()}
    fns: dict[str, Callable[[], object]] = {}
    for kind, text in texts.items():
        fns.update(readers(kind, text, args.repeat))
    us = medians_us(fns, args.repeat)
    base = us["vllm fresh"]
    print(f"median us per scrape (parse + pipeline update), {args.repeat} rounds, interleaved\n")
    print("| engine | fixture | KB | samples kept | same | fresh | fresh x vLLM |")
    print("|---|---|---|---|---|---|---|")
    for kind, text in texts.items():
        kept = len(promtext.parse(text, VLLM_KEEP))
        engine = Pipeline(HealthSettings()).update(
            RawPoll(1.0, (RawEngine("u", promtext.parse(text, VLLM_KEEP)),))
        )
        assert engine.engines[0].engine == kind, (kind, engine.engines[0].engine)
        print(
            f"| {kind} | {ENGINES[kind].relative_to(FIXTURES)} | {len(text) / 1024:.1f} | {kept} "
            f"| {us[f'{kind} same']:.0f} | {us[f'{kind} fresh']:.0f} "
            f"| {us[f'{kind} fresh'] / base:.2f} |"
        )


if __name__ == "__main__":
    main()
