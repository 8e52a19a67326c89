"""Parse + derive time per scrape of the real vLLM 0.32 capture, against prometheus_client alone.

Three timings over the same text in the same run (tests/fixtures/metrics-load.txt, 53 KB):
  plain     prometheus_client.parser.text_string_to_metric_families over the whole text
  filtered  llmtop.core.exposition.promtext.parse (its fast path finds the kept families'
            lines without splitting the text; prometheus_client only when the text is unusual)
  derive    the Pipeline update alone (extract, rates, quantiles, health rules)
  full      filtered parse + derive
Also the unfiltered promtext parse, to show what the pre-filter saves. Medians of many rounds,
the variants interleaved in each round; this box is noisy: compare ratios, not absolute figures.

The same text every round is the parser's best case since it memoises lines (a line seen
before is not parsed again), and the same samples every round leave derive nothing to add up.
The "fresh" rows read a new text each round instead: the capture with every counter, bucket,
sum and count advanced (bench/fleet_targets.py's Payload), so no kept line but the gauges is
one seen before: the worst case (between polls of the recorded runs in tests/fixtures, 26-36 %
of the kept samples change).

The fleet rows are the worst case of a fleet scraped directly: each round a second of 100
replicas, each with counters of its own speed (bench/fleet_targets.py's speed_of), so that the
100 bodies are distinct and every counter line has advanced since the round before; the CPU
time (thread time) to parse all 100, per body, median over the rounds. With --against REV the
same rounds also parse with llmtop/core/exposition/promtext.py as it was at git revision REV (loaded
beside this tree's), interleaved, so both are measured in one sitting; prometheus_client's
parser of the same bodies is the baseline.

The narrow rows parse the same replicas' seconds as a vLLM answers llmtop's narrow scrape
(only the series it reads, ~16 KB), as the fleet's scraper does; with --against REV also as
REV's fleet did (its `parse_like_last`, a replica's text read like its last, or its
promtext_memo.py, a whole-text layout per replica, where REV has one).

    python bench/bench_parse.py [--repeat 300] [--fleet-rounds 20] [--against main]
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_targets import Payload, speed_of
from prometheus_client.parser import text_string_to_metric_families

from llmtop.core.base.raw import RawEngine, RawPoll, Sample
from llmtop.core.exposition import promtext
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.vllm.names import sample_names
from llmtop.settings import HealthSettings
from llmtop.sim.exposition import restrict

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "metrics-load.txt"
KEEP = promtext.keep_names(sample_names())


def medians_us(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of one call of each, in microseconds, the calls interleaved round by
    round so that load from other processes hits every variant alike."""
    for fn in fns.values():
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) * 1e6 for name, ts in times.items()}


def _samples_of(names: Any, labels: Any, values: Any) -> Any:
    """`raw.samples_of` of revisions that had it (their parser imports it)."""
    return map(tuple.__new__, itertools.repeat(Sample), zip(names, labels, values, strict=True))


def promtext_at(rev: str) -> types.ModuleType:
    """promtext.py as it was at git revision `rev`, loaded beside this tree's (it imports the
    rest of llmtop from this tree). A revision from before core/ had sub-homes has it at
    llmtop/core/promtext.py, importing `llmtop.core.<module>`: read as this tree's home of it."""
    for path in ("llmtop/core/exposition/promtext.py", "llmtop/core/promtext.py"):
        shown = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True
        )
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"--against {rev}: no promtext.py there ({shown.stderr.strip()})")
    source = re.sub(
        r"\bllmtop\.core\.(\w+) import",
        lambda m: f"{_home_of(m[1])} import",
        shown.stdout,
    ).replace(", samples_of\n", "\n")
    module = types.ModuleType(f"promtext_at_{rev}")
    module.__dict__["samples_of"] = _samples_of
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def memo_at(rev: str, promtext_then: types.ModuleType) -> types.ModuleType | None:
    """REV's promtext_memo.py (None where it has none), over REV's parser `promtext_then`."""
    for path in ("llmtop/core/exposition/promtext_memo.py", "llmtop/core/promtext_memo.py"):
        shown = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True
        )
        if shown.returncode == 0:
            break
    else:
        return None
    module = types.ModuleType(f"promtext_memo_at_{rev}")
    module.__dict__.update(vars(promtext_then), promtext=promtext_then, samples_of=_samples_of)
    kept = [
        line
        for line in shown.stdout.splitlines()
        if not line.startswith("from llmtop.core") or "raw import" in line
    ]
    source = re.sub(
        r"\bllmtop\.core\.(\w+) import", lambda m: f"{_home_of(m[1])} import", "\n".join(kept)
    ).replace(", samples_of\n", "\n")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def _home_of(name: str) -> str:
    """`llmtop.core.<home>.<name>` for a module of core (or a home itself), in this tree."""
    found = sorted((ROOT / "llmtop" / "core").glob(f"*/{name}.py"))
    return f"llmtop.core.{found[0].parent.name}.{name}" if found else f"llmtop.core.{name}"


def fleet_rows(
    payload: Payload, narrowed: Payload, rounds: int, against: str | None
) -> dict[str, float]:
    """The fleet's worst case: per round, 100 distinct fresh bodies (a second of 100 replicas,
    rendered before the clock starts) parsed by each variant in turn, the order alternating round by
    round; CPU ms per body, median over the rounds (the first two warm up). The baseline parses
    every tenth body only. The narrow rows read the same seconds of the same replicas as a vLLM
    answers llmtop's narrow scrape (core/exposition/narrow.py: the kept series only), as the
    fleet does (and as REV's fleet did)."""
    parsers: dict[str, tuple[bool, Callable[[int, str], object]]] = {}
    if against is not None:
        old = promtext_at(against)
        old_keep = old.keep_names(sample_names())
        parsers[f"promtext.parse, filtered, at {against}"] = (
            False,
            lambda i, t: old.parse(t, old_keep),
        )
        parsers[f"narrow scrape, promtext.parse at {against}"] = (
            True,
            lambda i, t: old.parse(t, old_keep),
        )
        if hasattr(old, "parse_like_last"):
            lasts = {
                True: [old.LastText() for _ in range(100)],
                False: [old.LastText() for _ in range(100)],
            }
            for narrow_rows in (False, True):
                kind = "narrow scrape" if narrow_rows else "full scrape"
                parsers[f"{kind}, parse_like_last at {against}"] = (
                    narrow_rows,
                    lambda i, t, n=narrow_rows: old.parse_like_last(t, old_keep, lasts[n][i]),
                )
        old_memo = memo_at(against, old)
        if old_memo is not None:
            memos = [old_memo.Memo() for _ in range(100)]
            parsers[f"narrow scrape, promtext_memo.parse at {against}"] = (
                True,
                lambda i, t: old_memo.parse(t, old_keep, memos[i]),
            )
    parsers["promtext.parse, filtered, this tree"] = (False, lambda i, t: promtext.parse(t, KEEP))
    parsers["prometheus_client plain parse (baseline)"] = (
        False,
        lambda i, t: [s for fam in text_string_to_metric_families(t) for s in fam.samples],
    )
    parsers["narrow scrape, promtext.parse, this tree"] = (
        True,
        lambda i, t: promtext.parse(t, KEEP),
    )
    times: dict[str, list[float]] = {name: [] for name in parsers}
    for second in range(rounds + 2):
        full = [payload.render(float(second), speed_of(r)).decode() for r in range(100)]
        narrow = [narrowed.render(float(second), speed_of(r)).decode() for r in range(100)]
        order = list(parsers.items())
        for name, (is_narrow, parse) in order if second % 2 else order[::-1]:
            bodies = narrow if is_narrow else full
            step = 10 if "baseline" in name else 1  # 10 of them: 100x slower
            t0 = time.thread_time()
            for i in range(0, 100, step):
                parse(i, bodies[i])
            if second >= 2:
                times[name].append((time.thread_time() - t0) / len(range(0, 100, step)))
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--fleet-rounds", type=int, default=20, help="seconds of 100 replicas")
    ap.add_argument("--against", metavar="REV", help="also parse with promtext.py at REV")
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
    parsed = promtext.parse(text, KEEP)

    def derive() -> object:
        clock[0] += 1.0  # a poll a second: the history fills to its 10 minutes
        return pipeline.update(RawPoll(time=clock[0], engines=(RawEngine("u", parsed),)))

    def full() -> object:
        return (filtered(), derive())

    payload = Payload(text)
    n = args.repeat + 10

    def texts(speed: float) -> list[str]:
        """n texts, each a second on from the last: rendered before the clock starts."""
        return [payload.render(float(k), speed).decode() for k in range(n)]

    fresh_parsed = [promtext.parse(t, KEEP) for t in texts(2.0)]
    to_parse, to_run = texts(3.0), texts(5.0)  # other speeds: other numbers, lines not seen
    fresh_pipeline, fresh_derived = Pipeline(HealthSettings()), Pipeline(HealthSettings())
    rounds = {"parse": 0, "derive": 0, "full": 0}

    def fresh_parse() -> object:
        k = rounds["parse"] = rounds["parse"] + 1
        return promtext.parse(to_parse[k % n], KEEP)

    def fresh_derive() -> object:
        k = rounds["derive"] = rounds["derive"] + 1
        raw = RawPoll(time=float(k), engines=(RawEngine("u", fresh_parsed[k % n]),))
        return fresh_derived.update(raw)

    def fresh_full() -> object:
        k = rounds["full"] = rounds["full"] + 1
        samples = promtext.parse(to_run[k % n], KEEP)
        return fresh_pipeline.update(RawPoll(time=float(k), engines=(RawEngine("u", samples),)))

    results = medians_us(
        {
            "prometheus_client plain parse (baseline)": plain,
            "promtext.parse, no filter": unfiltered,
            "promtext.parse, filtered": filtered,
            "derive + health only (Pipeline.update)": derive,
            "filtered parse + derive + health": full,
            "fresh: promtext.parse, filtered": fresh_parse,
            "fresh: derive + health only": fresh_derive,
            "fresh: filtered parse + derive + health": fresh_full,
        },
        args.repeat,
    )
    rows = list(results.items())
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

    narrowed = Payload(restrict(text, KEEP.names), cache=300)
    fleet = fleet_rows(Payload(text, cache=300), narrowed, args.fleet_rounds, args.against)
    base = fleet["prometheus_client plain parse (baseline)"]
    print(
        f"\n### The fleet's worst case: 100 distinct fresh bodies a round, every counter "
        f"advancing\n\nCPU time per body, median of {args.fleet_rounds} rounds of 100.\n"
    )
    print("| parser | CPU per body | vs plain parse |")
    print("|---|---:|---:|")
    for name, ms in fleet.items():
        print(f"| {name} | {ms:.3f} ms | {ms / base:.3f}x |")


if __name__ == "__main__":
    main()
