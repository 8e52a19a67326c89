"""A target's next text read like its last (`promtext.parse_like_last`): the same samples (or
the same error) as `parse`, for any values, and `parse` whenever the lines are not the last
text's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import sample_names
from llmtop.errors import ScrapeError
from llmtop.sim.exposition import restrict

KEEP = promtext.keep_names(sample_names())
FULL = (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_text()
NARROW = restrict(FULL, KEEP.names)
_VALUE = re.compile(r"(?m)^(?!#)[^\n]* ([^ \n]+)$")
"""A sample line's value (group 1)."""


def exact(text: str) -> tuple[object, ...] | str:
    """The exact path alone (a plain predicate takes no fast path): samples or the error."""
    try:
        return promtext.parse(text, lambda name: KEEP(name))
    except ScrapeError as e:
        return str(e)


def like_last(text: str, last: promtext.LastText) -> tuple[object, ...] | str:
    try:
        return promtext.parse_like_last(text, KEEP, last)
    except ScrapeError as e:
        return str(e)


def same(a: object, b: object) -> bool:
    return repr(a) == repr(b)  # NaN != NaN, but its repr is stable


def learnt(text: str = NARROW) -> promtext.LastText:
    last = promtext.LastText()
    assert same(like_last(text, last), exact(text))
    assert last.key is not None
    return last


def _advanced(text: str) -> str:
    return _VALUE.sub(
        lambda m: m.group(0)[: -len(m.group(1))] + f"{float(m.group(1)) * 1.5 + 1:.1f}", text
    )


@pytest.mark.parametrize("text", [NARROW, FULL], ids=["narrow", "full"])
def test_a_vllm_scrape_is_learnt_and_read_by_one_split_next_time(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = learnt(text)
    advanced = _advanced(text)
    want = exact(advanced)
    monkeypatch.setattr(promtext, "parse", lambda *a: pytest.fail("parsed again"))
    assert same(promtext.parse_like_last(advanced, KEEP, last), want)


def test_a_series_that_appears_is_parsed_and_learnt() -> None:
    last = learnt()
    grown = NARROW + 'vllm:num_requests_running{engine="1",model_name="m"} 3.0\n'
    assert same(like_last(grown, last), exact(grown))
    assert same(like_last(_advanced(grown), last), exact(_advanced(grown)))
    assert same(like_last(NARROW, last), exact(NARROW))  # and back


VALUES = st.one_of(
    st.sampled_from(
        ["0", "-0", "-00", "+0", "-0.0", "1e400", "-1e400", "NaN", "+Inf", "-Inf", "1.2.3", "e"]
    ),
    st.from_regex(r"[-+0-9.eEnNaAIf]{1,8}", fullmatch=True),
    st.floats(allow_nan=True).map(repr),
    st.text(alphabet="0123456789_ x\t\r{}", min_size=0, max_size=4),
)


@given(st.data(), st.sampled_from([NARROW, FULL]))
def test_any_values_in_a_learnt_text_read_as_the_exact_path(data: st.DataObject, base: str) -> None:
    last = learnt(base)
    spots = list(_VALUE.finditer(base))
    chosen = data.draw(st.lists(st.integers(0, len(spots) - 1), max_size=6))
    out, at = [], 0
    for i in sorted(set(chosen)):
        m = spots[i]
        out.append(base[at : m.start(1)])
        out.append(data.draw(VALUES))
        at = m.end(1)
    text = "".join(out) + base[at:]
    assert same(like_last(text, last), exact(text))
    assert same(like_last(base, last), exact(base))  # the text before, read again


@pytest.mark.parametrize("cut", [0, 1, 100, len(NARROW) // 2, len(NARROW) - 1])
def test_a_cut_or_damaged_text_reads_as_the_exact_path(cut: int) -> None:
    last = learnt()
    for text in (NARROW[:cut], NARROW[:cut] + "\r" + NARROW[cut:], NARROW[:cut] + "x\n"):
        assert same(like_last(text, last), exact(text))
