"""The gateway's history file and its keeper, on a fake clock and the keeper's own step
(`flush`, what its thread calls): what is written reads back as a recording, the bounds hold,
and each fault turns history off (or moves a bad file aside) with a reason, never an exception."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from llmtop.core.base.raw import RawPoll
from llmtop.core.record.decode import read_recording_bytes
from llmtop.gateway.history import keeper as keeper_mod
from llmtop.gateway.history.keeper import HistoryKeeper
from llmtop.gateway.history.window import WindowError, window
from tests.support.history import ENGINE, T0, Clock, poll


def keeper(tmp_path: Path, clock: Clock, **kw: Any) -> HistoryKeeper:
    kw.setdefault("max_age_s", 86400.0)
    kw.setdefault("max_bytes", 200_000_000)
    return HistoryKeeper(
        tmp_path / "gateway-9000.sqlite", targets={"vllm": [ENGINE]}, clock=clock, **kw
    )


def read(k: HistoryKeeper, since: float, until: float | None = None) -> list[RawPoll]:
    return list(read_recording_bytes(b"".join(k.read(since, until))))


def test_polls_read_back_as_written_from_any_since(tmp_path: Path) -> None:
    clock = Clock()
    k = keeper(tmp_path, clock)
    written = [poll(i) for i in range(150)]
    for raw in written:
        k.put(raw)
    k.flush()
    assert k.on
    assert k.written == 150
    assert read(k, T0) == written
    assert read(k, T0 + 75) == written[75:]  # mid-group: the first line served is a keyframe
    assert read(k, T0 + 75, until=T0 + 80) == written[75:81]
    assert read(k, T0 + 1000) == []
    assert k.status()["oldest"] == T0


def test_the_history_survives_a_reopen_as_a_second_segment(tmp_path: Path) -> None:
    clock = Clock()
    first = keeper(tmp_path, clock)
    for i in range(30):
        first.put(poll(i))
    first.flush()
    first.close()
    second = keeper(tmp_path, clock)
    for i in range(30, 50):
        second.put(poll(i))
    second.flush()
    assert read(second, T0) == [poll(i) for i in range(50)]


def test_age_bound_prunes_the_oldest(tmp_path: Path) -> None:
    clock = Clock(T0 + 100)
    k = keeper(tmp_path, clock, max_age_s=60.0)
    for i in range(100):
        k.put(poll(i))
    k.flush()  # the first flush prunes: polls older than 60 s before the clock go
    kept = read(k, T0)
    assert kept
    assert kept[0].time >= T0 + 40
    assert k.oldest is not None
    assert k.oldest >= T0 + 40


def test_size_bound_holds(tmp_path: Path) -> None:
    clock = Clock()
    k = keeper(tmp_path, clock, max_bytes=40_000)
    for batch in range(5):
        for i in range(batch * 200, (batch + 1) * 200):
            k.put(poll(i))
        clock.t += keeper_mod.PRUNE_EVERY_S
        k.flush()
    assert k._store is not None
    assert k._store._used_bytes() <= 40_000
    kept = read(k, T0)
    assert kept[-1] == poll(999)
    assert kept[0].time > T0


def test_a_clock_step_back_drops_the_future_and_starts_a_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    k = keeper(tmp_path, clock)
    for i in range(100):
        k.put(poll(i))
    k.flush()
    with caplog.at_level(logging.WARNING, "llmtop.gateway"):
        for i in range(20):  # the clock went back 50 s
            k.put(poll(200 + i, t=T0 + 50 + i))
        k.flush()
    polls = read(k, T0)
    times = [p.time for p in polls]
    assert times == sorted(times)
    assert times[-1] == T0 + 69
    assert times.count(T0 + 50) == 1
    assert k.steps_back == 1
    assert "clock stepped back 49.0 s" in caplog.text


def test_a_corrupt_file_is_moved_aside_and_history_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gateway-9000.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    k = keeper(tmp_path, Clock())
    with caplog.at_level(logging.WARNING, "llmtop.gateway"):
        k.put(poll(0))
        k.flush()
    assert k.on
    assert read(k, T0) == [poll(0)]
    (aside,) = tmp_path.glob("gateway-9000.sqlite.corrupt-*")
    assert aside.read_bytes().startswith(b"not a database")
    assert "moved to" in caplog.text
    assert "corrupt" in caplog.text


def test_a_file_of_another_version_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "gateway-9000.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE polls(t REAL)")
    con.execute("PRAGMA user_version=7")
    con.commit()
    con.close()
    k = keeper(tmp_path, Clock())
    k.put(poll(0))
    k.flush()
    assert k.on
    assert read(k, T0) == [poll(0)]
    assert list(tmp_path.glob("gateway-9000.sqlite.v7-*"))
    assert any("another llmtop version (schema 7)" in n for n in k.notes)


def test_an_unwritable_folder_turns_history_off_with_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    k = HistoryKeeper(
        blocker / "gateway-9000.sqlite", max_age_s=60, max_bytes=10**6, targets={}, clock=Clock()
    )
    with caplog.at_level(logging.WARNING, "llmtop.gateway"):
        k.put(poll(0))
        k.flush()
    status = k.status()
    assert status["on"] is False
    assert "cannot make the folder" in status["why_off"]
    assert caplog.text.count("history off") == 1


def test_a_full_disk_turns_history_off_and_it_comes_back(tmp_path: Path) -> None:
    clock = Clock()
    k = keeper(tmp_path, clock, max_pages=9)  # SQLite's page cap: "database or disk is full"
    for i in range(1200):
        k.put(poll(i))
    k.flush()
    assert k.status()["on"] is False
    assert k.status()["why_off"] == "disk full"
    k.put(poll(3000))  # the event loop's side never raises
    k._max_pages = None
    clock.t += keeper_mod.RETRY_S
    k.flush()  # the retry opens the file again
    k.put(poll(3001))
    k.flush()
    assert k.on
    assert read(k, T0 + 3001) == [poll(3001)]


def test_a_second_gateway_on_the_same_file_is_refused(tmp_path: Path) -> None:
    first = keeper(tmp_path, Clock())
    first.flush()
    second = keeper(tmp_path, Clock())
    second.flush()
    assert first.on
    assert second.why_off is not None
    assert "in use by another gateway" in second.why_off


def test_a_full_queue_drops_the_oldest_and_counts(tmp_path: Path) -> None:
    k = keeper(tmp_path, Clock())
    for i in range(keeper_mod.QUEUE_MAX + 25):
        k.put(poll(i))
    assert k.dropped == 25
    k.flush()
    assert read(k, T0)[0] == poll(25)


def test_off_keeps_nothing_and_says_why(tmp_path: Path) -> None:
    k = HistoryKeeper(None, max_age_s=1, max_bytes=1, targets={}, why_off="turned off")
    k.put(poll(0))
    k.start()
    assert k.status()["on"] is False
    assert k.status()["why_off"] == "turned off"
    assert list(read_recording_bytes(b"".join(k.read(0, None)))) == []


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        ("3600", None, (T0 - 3600, None)),
        ("1h", "30m", (T0 - 3600, T0 - 1800)),
        ("90s", None, (T0 - 90, None)),
        (f"{T0 - 5:.3f}", f"{T0:.3f}", (T0 - 5, T0)),
    ],
)
def test_since_and_until(since: str, until: str | None, expected: tuple[float, Any]) -> None:
    assert window(since, until, T0) == expected


@pytest.mark.parametrize(("since", "until"), [(None, None), ("soon", None), ("1m", "1h")])
def test_bad_windows_are_one_line(since: str | None, until: str | None) -> None:
    with pytest.raises(WindowError):
        window(since, until, T0)
