"""A target's whole text read in one match: the same samples (or the same error) as the block
pass, for any values, and the block pass whenever the lines are not the last text's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmtop.core.exposition import promtext, promtext_memo
from llmtop.core.vllm.names import sample_names
from llmtop.errors import ScrapeError
from llmtop.sim.exposition import restrict

KEEP = promtext.keep_names(sample_names())
NARROW = restrict(
    (Path(__file__).parent.parent / "fixtures" / "metrics-load.txt").read_text(), KEEP.names
)
_VALUE = re.compile(r"(?m)^(?!#)[^\n]* ([^ \n]+)$")
"""A sample line's value (group 1)."""


def exact(text: str) -> tuple[object, ...] | str:
    """The exact path alone (a plain predicate takes no fast path): samples or the error."""
    try:
        return promtext.parse(text, lambda name: KEEP(name))
    except ScrapeError as e:
        return str(e)


def memoised(text: str, memo: promtext_memo.Memo) -> tuple[object, ...] | str:
    try:
        return promtext_memo.parse(text, KEEP, memo)
    except ScrapeError as e:
        return str(e)


def same(a: object, b: object) -> bool:
    return repr(a) == repr(b)  # NaN != NaN, but its repr is stable


def learnt() -> promtext_memo.Memo:
    memo = promtext_memo.Memo()
    assert memoised(NARROW, memo) == exact(NARROW)
    assert memo.whole is not None
    return memo


def test_a_narrow_vllm_scrape_is_learnt_and_read_whole_next_time() -> None:
    memo = learnt()
    advanced = _VALUE.sub(
        lambda m: m.group(0)[: -len(m.group(1))] + f"{float(m.group(1)) * 1.5 + 1:.1f}", NARROW
    )
    whole = memo.whole
    assert whole is not None
    read = promtext_memo._read(advanced, whole)  # the one-match path, not the fallback
    assert read is not None
    assert same(read, exact(advanced))
    assert memo.misses == 1


def test_a_text_with_skipped_families_learns_no_layout(fixtures_dir: Path) -> None:
    memo = promtext_memo.Memo()
    text = (fixtures_dir / "metrics-load.txt").read_text()
    assert same(memoised(text, memo), exact(text))
    assert memo.whole is None


def test_a_series_that_appears_is_read_by_the_block_pass_and_learnt() -> None:
    memo = learnt()
    grown = NARROW + 'vllm:num_requests_running{engine="1",model_name="m"} 3.0\n'
    assert same(memoised(grown, memo), exact(grown))
    assert memo.misses == 2  # not relearnt at once: a stray line learns no layout anyway
    for _ in range(promtext_memo.RELEARN_EVERY):
        assert same(memoised(NARROW, memo), exact(NARROW))


VALUES = st.one_of(
    st.sampled_from(
        ["0", "-0", "-00", "+0", "-0.0", "1e400", "-1e400", "NaN", "+Inf", "-Inf", "1.2.3", "e"]
    ),
    st.from_regex(r"[-+0-9.eEnNaAIf]{1,8}", fullmatch=True),
    st.floats(allow_nan=True).map(repr),
    st.text(alphabet="0123456789_ x\t\r{}", min_size=0, max_size=4),
)


@given(st.data())
def test_any_values_in_a_learnt_layout_read_as_the_exact_path(data: st.DataObject) -> None:
    memo = learnt()
    spots = list(_VALUE.finditer(NARROW))
    chosen = data.draw(st.lists(st.integers(0, len(spots) - 1), max_size=6))
    out, at = [], 0
    for i in sorted(set(chosen)):
        m = spots[i]
        out.append(NARROW[at : m.start(1)])
        out.append(data.draw(VALUES))
        at = m.end(1)
    text = "".join(out) + NARROW[at:]
    assert same(memoised(text, memo), exact(text))


@pytest.mark.parametrize("cut", [0, 1, 100, len(NARROW) // 2, len(NARROW) - 1])
def test_a_cut_or_damaged_text_reads_as_the_exact_path(cut: int) -> None:
    memo = learnt()
    for text in (NARROW[:cut], NARROW[:cut] + "\r" + NARROW[cut:], NARROW[:cut] + "x\n"):
        assert same(memoised(text, memo), exact(text))
