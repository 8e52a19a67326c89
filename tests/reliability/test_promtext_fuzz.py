"""The metrics parser fed random, truncated and corrupted exposition text (hypothesis): it returns
samples or raises ScrapeError naming the line (its number and text, as found in the input), and
never anything else. The scrape around it turns any body into an error field, never a raise.

tests/unit/test_promtext.py checks the hand-picked bad inputs; this is the fuzz layer.
"""

from __future__ import annotations

import ast
import asyncio
import math
import os
import re
from pathlib import Path

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmtop.core.base.raw import Sample
from llmtop.core.exposition import promtext
from llmtop.errors import ScrapeError
from llmtop.sources.vllm import VLLM_KEEP, scrape_engine
from tests.support.faults import FIGURES

LOAD = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_bytes()
EXAMPLES = int(os.environ.get("LLMTOP_FUZZ_EXAMPLES", "400"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_AT_LINE = re.compile(r" at line (\d+): (.*)$")

# exposition-shaped lines with odd parts: the parser's corners, not just noise
names = st.sampled_from(
    [
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens",  # a kept family's name: kept on sample lines too
        "vllm:prompt_tokens_total",
        "vllm:request_prompt_tokens_bucket",  # a kept family, a skipped sample name
        "python_gc_total",
        "x",
        "9bad",
        "a-b",
        "",
    ]
)
label_values = st.text(alphabet='ab"\\\n{}=, é', max_size=6)
values = st.sampled_from(["1", "-0", "1e3", "NaN", "+Inf", "-Inf", "0x1", "", "1 2 3", "abc"])
lines = st.one_of(
    st.builds(lambda n, v: f"{n} {v}", names, values),
    st.builds(lambda n, lv, v: f'{n}{{engine="{lv}"}} {v}', names, label_values, values),
    st.builds(lambda n, t: f"# TYPE {n} {t}", names, st.sampled_from(["counter", "gauge", "x"])),
    st.builds(lambda n: f"# HELP {n} help \\ text", names),
    st.builds(lambda n, s: f"{n}{s} 1", names, st.sampled_from(["_total", "_bucket", "x"])),
    st.text(max_size=30),
)
# the real capture's family blocks (HELP, TYPE, samples), for reordering and repeating
BLOCKS = ["# HELP " + b for b in LOAD.decode().split("# HELP ")[1:]]


def check(text: str, keep: promtext.Keep | None) -> str:
    """Parse; a ScrapeError must name a line of `text` (number and text). 'ok' or 'error'."""
    try:
        samples = promtext.parse(text, keep)
    except ScrapeError as e:
        message = str(e)
        assert "\n" not in message, message
        m = _AT_LINE.search(message)
        assert m, message
        shown = ast.literal_eval(m.group(2))
        line = text.splitlines()[int(m.group(1)) - 1]
        # shown as read, or stripped of surrounding blanks, and cut when long
        if shown.endswith("..."):
            assert line.strip().startswith(shown[:-3].strip()), (message, line)
        else:
            assert shown in (line, line.strip()), (message, line)
        return "error"
    for s in samples:
        assert isinstance(s, Sample)
        assert isinstance(s.value, float)
        assert s.name
    return "ok"


def test_truncated_and_corrupted_real_scrape() -> None:
    tried: dict[str, int] = {"ok": 0, "error": 0}

    @FUZZ
    @given(
        cut=st.integers(0, len(LOAD)),
        flips=st.lists(st.tuples(st.integers(0, len(LOAD) - 1), st.integers(0, 255)), max_size=6),
        filtered=st.booleans(),
    )
    def run(cut: int, flips: list[tuple[int, int]], filtered: bool) -> None:
        data = bytearray(LOAD)
        for at, byte in flips:
            data[at] = byte
        text = bytes(data[:cut]).decode("utf-8", "replace")
        tried[check(text, VLLM_KEEP if filtered else None)] += 1

    run()
    FIGURES["inputs"] += sum(tried.values())
    # the fuzz reached both sides: clean cuts parse, corrupted lines are named
    assert tried["ok"] > 0
    assert tried["error"] > 0


def test_random_exposition_lines() -> None:
    tried = 0

    @FUZZ
    @given(st.lists(lines, max_size=12), st.booleans())
    def run(body: list[str], filtered: bool) -> None:
        nonlocal tried
        tried += 1
        check("\n".join(body), VLLM_KEEP if filtered else None)

    run()
    FIGURES["inputs"] += tried


def test_any_body_from_a_target_is_an_error_field_never_a_raise() -> None:
    tried = 0
    loop = asyncio.new_event_loop()

    @FUZZ
    @given(
        body=st.binary(max_size=400) | st.builds(lambda c: LOAD[:c], st.integers(0, len(LOAD))),
        ctype=st.sampled_from(["text/plain", "text/html", "application/json", ""]),
        status=st.sampled_from([200, 200, 200, 404, 500]),
    )
    def run(body: bytes, ctype: str, status: int) -> None:
        nonlocal tried
        tried += 1

        def answer(request: httpx.Request) -> httpx.Response:
            headers = {"content-type": ctype} if ctype else {}
            return httpx.Response(status, content=body, headers=headers)

        async def scrape() -> None:
            async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
                raw = await scrape_engine(
                    client, "http://engine:8000", timeout_s=1.0, max_bytes=1 << 20
                )
            if raw.samples is None:
                assert raw.error
                assert "\n" not in raw.error
            else:
                assert raw.error is None
                assert all(isinstance(s.value, float) for s in raw.samples)
                assert not any(math.isnan(s.value) and s.name == "" for s in raw.samples)

        loop.run_until_complete(scrape())

    try:
        run()
    finally:
        loop.close()
    FIGURES["inputs"] += tried


def _outcome(text: str, keep: promtext.Keep) -> str:
    try:
        return repr(promtext.parse(text, keep))  # repr: NaN compares equal to itself
    except ScrapeError as e:
        return f"error: {e}"


def test_fast_path_equals_exact_path() -> None:
    """The line-free fast path returns exactly what the line-by-line path returns, or the same
    error: fed corrupted real scrapes and odd exposition lines."""
    exact: promtext.Keep = lambda name: VLLM_KEEP(name)  # noqa: E731 (a plain predicate: no fast path)
    tried = 0

    @FUZZ
    @given(
        cut=st.integers(0, len(LOAD)),
        flips=st.lists(st.tuples(st.integers(0, len(LOAD) - 1), st.integers(0, 255)), max_size=4),
        body=st.lists(lines, max_size=8),
    )
    def run(cut: int, flips: list[tuple[int, int]], body: list[str]) -> None:
        nonlocal tried
        data = bytearray(LOAD)
        for at, byte in flips:
            data[at] = byte
        for text in (bytes(data[:cut]).decode("utf-8", "replace"), "\n".join(body)):
            tried += 1
            assert _outcome(text, VLLM_KEEP) == _outcome(text, exact)

    run()
    FIGURES["inputs"] += tried


def test_fast_path_equals_exact_path_on_reordered_blocks() -> None:
    """The fast path reads a family block in one match: the capture's blocks shuffled,
    repeated, with odd lines put between or inside them and the text cut anywhere."""
    exact: promtext.Keep = lambda name: VLLM_KEEP(name)  # noqa: E731 (a plain predicate: no fast path)
    tried = {"samples": 0, "error": 0}

    @FUZZ
    @given(
        blocks=st.lists(st.sampled_from(BLOCKS), min_size=1, max_size=12),
        inserts=st.lists(st.tuples(st.integers(0, 1 << 16), lines), max_size=3),
        cut=st.integers(0, 1 << 16) | st.none(),
    )
    def run(blocks: list[str], inserts: list[tuple[int, str]], cut: int | None) -> None:
        text = "".join(blocks)
        for at, line in inserts:
            at = text.rfind("\n", 0, at % (len(text) + 1)) + 1  # at a line start
            text = text[:at] + line + "\n" + text[at:]
        if cut is not None:
            text = text[: cut % (len(text) + 1)]
        outcome = _outcome(text, VLLM_KEEP)
        assert outcome == _outcome(text, exact)
        tried["error" if outcome.startswith("error") else "samples"] += 1

    run()
    FIGURES["inputs"] += sum(tried.values())
    assert tried["samples"] > 0
    assert tried["error"] > 0
