"""promtext: real vLLM 0.32 captures, filtering, and errors that name the bad line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from llmtop.core.base.raw import Sample
from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import sample_names
from llmtop.errors import ScrapeError

KEEP = promtext.keep_names(sample_names())


def test_load_capture_keeps_only_what_llmtop_reads(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "metrics-load.txt").read_text()
    samples = promtext.parse(text, KEEP)
    names = {s.name for s in samples}
    assert "vllm:num_requests_running" in names
    assert "vllm:prompt_tokens_total" in names  # _total kept on the sample name
    assert "vllm:time_to_first_token_seconds_bucket" in names
    assert not any(n.startswith(("python_", "process_", "http_")) for n in names)
    assert not any(n.endswith("_created") for n in names)
    running = [s for s in samples if s.name == "vllm:num_requests_running"]
    assert running[0].value == 4.0
    assert dict(running[0].labels) == {"engine": "0", "model_name": "tinyllm"}


def test_filtered_parse_agrees_with_plain_parse(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "metrics-load.txt").read_text()
    plain = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    filtered = promtext.parse(text, KEEP)
    assert filtered
    for s in filtered:
        assert plain[(s.name, s.labels)] == s.value
    wanted = {k for k in plain if k[0] in sample_names()}
    assert wanted == {(s.name, s.labels) for s in filtered}


def test_parse_without_filter_returns_everything(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "metrics-idle.txt").read_text()
    everything = promtext.parse(text)
    assert any(s.name.startswith("python_gc") for s in everything)
    assert len(everything) > len(promtext.parse(text, KEEP))


def test_malformed_wanted_line_is_named() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 1.0\n'
        'vllm:num_requests_running{engine="1" oops\n'
    )
    with pytest.raises(ScrapeError, match=r"line 3: .*engine=\"1\" oops"):
        promtext.parse(text, KEEP)


def test_malformed_unwanted_line_is_still_an_error() -> None:
    text = 'python_info{version="3"} 1.0\nthis is not exposition text\n'
    with pytest.raises(ScrapeError, match="line 2"):
        promtext.parse(text, KEEP)


def test_html_body_is_an_error_naming_the_first_line() -> None:
    with pytest.raises(ScrapeError, match=r"line 1: '<!DOCTYPE html>'"):
        promtext.parse("<!DOCTYPE html>\n<html><body>hi</body></html>\n", KEEP)


def test_long_bad_line_is_truncated() -> None:
    with pytest.raises(ScrapeError) as info:
        promtext.parse("vllm:num_requests_running " + "x" * 500 + "\n", KEEP)
    assert len(str(info.value)) < 200
    assert "..." in str(info.value)


def test_dcgm_prefix_filter() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",modelName="H100"} 61\n'
        "go_goroutines 12\n"
    )
    samples = promtext.parse(text, promtext.keep_prefix("DCGM_FI_"))
    assert [(s.name, s.value) for s in samples] == [("DCGM_FI_DEV_GPU_TEMP", 61.0)]


@given(st.text(max_size=200))
def test_any_text_parses_or_raises_scrape_error(text: str) -> None:
    message = None
    try:
        samples = promtext.parse(text, KEEP)
    except ScrapeError as e:
        message = str(e)
        samples = ()
    assert message is None or "line " in message
    assert all(s.name in sample_names() for s in samples)


FRAGMENTS = [
    "vllm:num_requests_running",
    "vllm:time_to_first_token_seconds_bucket",
    "python_info",
    '{engine="0"}',
    '{le="+Inf"',
    '"',
    "}",
    " 1.0",
    " NaN",
    " x",
    "\n",
    "# TYPE vllm:num_requests_running gauge\n",
    "# TYPE vllm:num_requests_running counter\n",
    "# HELP x y\n",
]


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30))
def test_near_miss_exposition_parses_or_names_a_line(parts: list[str]) -> None:
    message = None
    try:
        promtext.parse("".join(parts), KEEP)
    except ScrapeError as e:
        message = str(e)
    assert message is None or "line " in message


def _exact(text: str) -> tuple[object, ...] | str:
    """The exact path alone (a plain predicate takes no fast path): samples or the error."""
    try:
        return promtext.parse(text, lambda name: KEEP(name))
    except ScrapeError as e:
        return str(e)


def _either(text: str) -> tuple[object, ...] | str:
    try:
        return promtext.parse(text, KEEP)
    except ScrapeError as e:
        return str(e)


def _same(a: object, b: object) -> bool:
    return repr(a) == repr(b)  # NaN != NaN, but its repr is stable


@pytest.mark.parametrize(
    "name", ["metrics-load.txt", "metrics-idle.txt", "sim-metrics-load.txt", "sim-metrics-idle.txt"]
)
def test_fast_path_reads_real_captures_exactly(fixtures_dir: Path, name: str) -> None:
    text = (fixtures_dir / name).read_text()
    fast = promtext._fast(text, KEEP)
    assert fast is not None  # real exporters' text takes the fast path
    assert fast == _exact(text)


FAST_CORNERS = [
    'vllm:num_requests_running{engine="0"} -0\n',
    'vllm:num_requests_running{engine="0"} -0.0\n',
    'vllm:num_requests_running{engine="0",} 1e3\n',
    "vllm:num_requests_running{} NaN\n",
    'vllm:num_requests_running{engine="a\\"b"} 1\n',
    'vllm:num_requests_running{engine="0",engine="1"} 1\n',
    'vllm:num_requests_running{__x="0"} 1\n',
    'vllm:num_requests_running{engine="0"} 1 1700000000\n',
    'vllm:num_requests_running{engine="0"}\t1\n',
    "  vllm:num_requests_running 1\n",
    "vllm:num_requests_running 1_0\n",
    "# TYPE vllm:num_requests_running counter\nvllm:num_requests_running 1\n",
    "#\tTYPE vllm:num_requests_running counter\nvllm:num_requests_running 1\n",
    "# TYPE vllm:num_requests_running bogus\nvllm:num_requests_running 1\n",
    "vllm:num_requests_running 1\r\nvllm:num_requests_waiting 2\n",
    "vllm:num_requests_running 1\u2028vllm:num_requests_waiting 2\n",
    'vllm:num_requests_running{engine="\u00e9"} 1',
    # the family blocks the fast path reads in one match, and their near misses
    "# HELP vllm:prompt_tokens_total doc\n# TYPE vllm:prompt_tokens_total counter\n"
    'vllm:prompt_tokens_total{engine="0"} 5\nvllm:prompt_tokens_created{engine="0"} 1e9\n',
    "# HELP vllm:prompt_tokens doc\n# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens 5\n",
    "vllm:prompt_tokens 2\nvllm:time_to_first_token_seconds 1\n",  # family names, kept
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1 1700000000\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running  1\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1 \n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1.2.3\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running -0\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running -" + "1" * 400 + "\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running " + "9" * 5000 + "\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1e400\n",
    '# HELP vllm:num_requests_running x\nvllm:num_requests_running{a="1",a="2"} 1\n',
    "# HELP vllm:num_requests_running x\nvllm:num_requests_runningx 1\n",
    "# HELP vllm:num_requests x\nvllm:num_requests_running 1\nvllm:num_requests_waiting 2\n",
    "# HELP python_gc x\n# TYPE python_gc counter\npython_gc_total 1\n",
    "# HELP python_gc x\npython_gc_total 1\nvllm:num_requests_running 3\n",
    '# HELP python_gc x\npython_gc_total{a="1"} 1\npython_gc_total oops\n',
    '# HELP python_gc x\npython_gc_total 1\n{__name__="vllm:num_requests_running"} 1\n',
    "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running 1\nvllm:num_requests_running 2\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1\nnot exposition\n"
    "vllm:num_requests_running 2\n",
    "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1\r\n",
    '# HELP vllm:num_requests_running x\nvllm:num_requests_running{engine="0"} 1',
    '# HELP vllm:num_requests_running x\nvllm:num_requests_running{engine="0"',
    "# HELP vllm:num_requests_running\nvllm:num_requests_running 1\n",
    "# HELP  vllm:num_requests_running x\nvllm:num_requests_running 1\n",
]


@pytest.mark.parametrize("text", FAST_CORNERS)
def test_fast_path_agrees_with_exact_path_on_corners(text: str) -> None:
    assert _same(_either(text), _exact(text))


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30))
def test_fast_path_agrees_with_exact_path_on_near_misses(parts: list[str]) -> None:
    text = "".join(parts)
    assert _same(_either(text), _exact(text))


def _family(name: str, kind: str, values: list[str]) -> str:
    """One family block as prometheus_client writes it (HELP, TYPE, samples)."""
    suffix = {"histogram": "_bucket", "counter": "", "gauge": ""}[kind]
    lines = [f"# HELP {name} Some help.", f"# TYPE {name} {kind}"]
    for i, v in enumerate(values):
        lines.append(f'{name}{suffix}{{engine="0",le="{i}"}} {v}')
    return "\n".join(lines) + "\n"


FAMILIES = [
    _family("vllm:num_requests_running", "gauge", ["4.0"]),
    _family("vllm:prompt_tokens_total", "counter", ["5291.0"]),
    _family("vllm:prompt_tokens_created", "gauge", ["1.7e9"]),
    _family("vllm:generation_tokens", "counter", ["7.0", "9.0"]),  # typed without _total
    "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens 3.0\n",  # and no HELP
    _family("vllm:time_to_first_token_seconds", "histogram", ["0.0", "3.0", "7.0"]),
    _family("vllm:request_prompt_tokens", "histogram", ["1.0", "2.0"]),  # a kept name's start
    _family("python_gc_objects_collected_total", "counter", ["14851.0"]),
    _family("http_request_duration_seconds", "histogram", ["1.0", "+Inf"]),
]


@given(
    st.lists(st.sampled_from(FAMILIES), max_size=10),
    st.integers(0, 2000),
    st.sampled_from(["", "not exposition\n", "\r", "vllm:num_requests_running 7\n", "\n"]),
)
def test_fast_path_agrees_with_exact_path_on_family_blocks(
    families: list[str], at: int, insert: str
) -> None:
    """Blocks in any order, repeated, cut anywhere, a bad or stray line put anywhere."""
    text = "".join(families)
    for body in (text, text[:at], text[:at] + insert + text[at:]):
        assert _same(_either(body), _exact(body))


def test_fast_path_takes_the_blocks() -> None:
    """Each of those blocks, whole, is read by the fast path (no fallback)."""
    text = "".join(FAMILIES)
    fast = promtext._fast(text, KEEP)
    assert fast is not None
    assert fast == _exact(text)
    assert {s.name for s in fast} == {
        "vllm:num_requests_running",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
    }


@pytest.mark.parametrize(
    "value", ["2.5", "0", "-0", "-00", "+0", "-0.0", "-1", "1e400", "NaN", "+Inf", "1.2.3", "e"]
)
def test_a_block_seen_before_reads_as_the_exact_path(value: str) -> None:
    """The second time a block's lines are read, their names and labels come from what they
    read as the first time: the values still read as the exact path reads them ("-0" as 0),
    or not at all (then the exact path names the line)."""
    keep = promtext.keep_names(sample_names())
    block = (
        "# HELP vllm:request_prompt_tokens x\n# TYPE vllm:request_prompt_tokens histogram\n"
        'vllm:request_prompt_tokens_bucket{{le="1"}} {v}\n'
        "vllm:request_prompt_tokens_count {v}\nvllm:request_prompt_tokens_sum 3\n"
    )
    first = block.format(v="1")
    assert promtext._fast(first, keep) == _exact(first)
    text = block.format(v=value)
    fast = promtext._fast(text, keep)
    if value in ("1.2.3", "e"):
        assert fast is None  # the exact path names the line
    else:
        assert fast is not None
        assert _same(fast, _exact(text))


def test_a_family_name_on_a_sample_line_is_kept_on_both_paths() -> None:
    """The exact path keeps a sample named as a kept family (a counter written without
    `_total`); the fast path used to skip it."""
    text = "vllm:prompt_tokens 2\n"
    assert promtext.parse(text, KEEP) == (Sample("vllm:prompt_tokens", (), 2.0),)
    assert _exact(text) == promtext.parse(text, KEEP)


def test_an_integer_past_a_floats_range_is_inf_on_both_paths() -> None:
    """prometheus_client reads it as an int, which float() cannot take: not an OverflowError."""
    text = "vllm:num_requests_running -" + "1" * 400 + "\n"
    assert promtext.parse(text, KEEP) == (Sample("vllm:num_requests_running", (), -math.inf),)
    assert _exact(text) == promtext.parse(text, KEEP)


def test_bad_last_line_after_many_comments_is_named_quickly() -> None:
    """A line matching two shapes would make the text check backtrack exponentially."""
    import time

    text = "# HELP x some help\n# a comment\n" * 2000 + "not exposition\n"
    start = time.process_time()
    with pytest.raises(ScrapeError, match="line 4001"):
        promtext.parse(text, KEEP)
    assert time.process_time() - start < 2.0


def test_threads_sharing_a_keep_read_every_text_exactly() -> None:
    """Threads share a keep-list's memo of line prefixes as they read: never a wrong answer."""
    import threading

    keep = promtext.keep_names(sample_names())
    texts = [
        f'# HELP vllm:num_requests_running x\nvllm:num_requests_running{{e="{i % 12}"}} {i}\n'
        for i in range(300)
    ]
    wrong: list[str] = []

    def read() -> None:
        for text in texts:
            if promtext.parse(text, keep) != _exact(text):
                wrong.append(text)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not wrong
