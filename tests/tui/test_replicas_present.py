"""The replica table's pure layout (tui/view/replicas.py): column widths per terminal width, cuts
with an ellipsis, which rows fit a height, sub-rows, and a restart in the event log."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from llmtop.core.base.raw import RawPoll
from llmtop.core.base.snapshot import FleetSnapshot
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.settings import HealthSettings
from llmtop.tui.view import replicas as rp
from llmtop.tui.view.present import diff_events
from tests.support.fleet import raw, scrape, url


def fleet(n: int = 3, t_end: int = 6) -> FleetSnapshot:
    p = FleetPipeline(HealthSettings())
    snap = None
    for t in range(1, t_end + 1):
        snap = p.update(
            RawPoll(time=float(t), engines=tuple(raw(url(i), scrape(t)) for i in range(n)))
        )
    assert isinstance(snap, FleetSnapshot)
    return snap


def test_numbers_keep_their_width_and_the_finding_takes_the_rest() -> None:
    snap = fleet()
    assert snap.fleet is not None
    rows = snap.fleet.replicas
    for width in (78, 118, 198):
        cols = rp.widths(rows, width)
        used = sum(w for w in cols if w) + sum(1 for w in cols if w) - 1 + rp.MARK_WIDTH
        assert used == width  # every cell of the line is used, none more
        assert [cols[i] for i in (3, 4, 5, 6, 7)] == [4, 9, 6, 6, 6]
        assert cols[rp.NAME] == len("10.0.0.0:8000")
        assert cols[rp.MODEL] == 0  # one model: the header names it
        assert cols[rp.ENGINE] == 0  # all vLLM: no engine column
    assert rp.widths(rows, 118)[rp.FINDING] - rp.widths(rows, 78)[rp.FINDING] == 40


def test_names_indents_and_models_size_their_columns() -> None:
    """Widths read from the replicas (the widget builds only the rows it shows): a long name
    takes NAME_MAX, a sub-row's name counts its indent, a second model opens its column."""
    snap = fleet(4)
    assert snap.fleet is not None
    reps = list(snap.fleet.replicas)
    model = reps[0].stats.model or ""
    reps[1] = replace(
        reps[1],
        name="a-much-longer-replica-name-than-the-others:8000",
        stats=replace(reps[1].stats, model="another-model"),
    )
    reps[2] = replace(reps[2], name="10.0.0.2:8000#engine=1", parent=reps[0].key, engine="1")
    cols = rp.widths(reps, 198)
    assert cols[rp.NAME] == rp.NAME_MAX
    assert cols[rp.MODEL] == min(max(len(model), len("another-model")), rp.MODEL_MAX)
    assert rp.widths(reps[2:3], 118)[rp.NAME] == len("10.0.0.2:8000#engine=1") + 2
    assert rp.widths(reps[2:3], 118)[rp.MODEL] == 0  # one model
    assert rp.widths([], 118)[rp.NAME] == len("replica")
    for width in (40, 60, 80, 118, 198):
        row_cells = [rp.cells(rp.row(r), rp.widths(reps, width)) for r in reps]
        assert len({sum(map(len, c)) + len(c) - 1 for c in row_cells}) == 1  # lines align


def test_names_are_cut_at_the_start_findings_at_the_end() -> None:
    assert rp.clip("127.0.0.1:40123", 10, keep_end=True) == "…0.1:40123"
    assert rp.clip("kv-exhausted: KV cache full", 12) == "kv-exhauste…"
    assert rp.clip("short", 12) == "short"
    assert rp.clip("abc", 0) == ""


def test_the_rows_that_fit_keep_the_worst_and_the_selected_one() -> None:
    assert rp.fit(3, 10, 0) == rp.Window(0, 3, 0, 0)  # all fit: no "more" line
    assert rp.fit(3, 0, 0) == rp.Window(0, 3, 0, 0)  # not laid out yet: every row
    w = rp.fit(100, 8, 0)  # headings, 6 rows, the "more" line
    assert (w.start, w.stop, w.below) == (0, 6, 94)
    assert rp.more_line(w).startswith("… 94 more below")
    w = rp.fit(100, 8, 9)  # the 10th selected: moved down just enough
    assert (w.start, w.stop, w.above, w.below) == (4, 10, 4, 90)


def test_a_restart_goes_to_the_event_log_once() -> None:
    p = FleetPipeline(HealthSettings())
    snaps = []
    for t in range(1, 30):
        since = 25.0 if t >= 25 else 0.0
        engines = tuple(raw(url(i), scrape(t, since=since if i == 1 else 0.0)) for i in range(3))
        snaps.append(p.update(RawPoll(time=float(t), engines=engines)))
    logged = [e.text for a, b in pairwise(snaps) for e in diff_events(a, b)]
    assert p.fleet is not None
    (event,) = p.fleet.events
    assert logged.count(event.summary) == 1
    assert event.summary.startswith("10.0.0.1:8000 restarted")
