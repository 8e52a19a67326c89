"""Behaviour stays: the three recorded runs replay to the golden 31930be's tree produced.

Every poll's snapshot, the report, `snapshot`'s windows and a three-times-looped replay are
compared by digest (tests/support/replay_golden.py says what each covers). After a deliberate
change of behaviour, regenerate the golden with
`PYTHONPATH=. python tests/support/replay_golden.py --write` and commit its diff with the change
that explains it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import replay_golden


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(replay_golden.GOLDEN.read_text())
    return data


def _first_difference(want: list[str], got: list[str]) -> str:
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g:
            return f"first at poll {i}"
    return f"{len(want)} polls in the golden, {len(got)} now"


@pytest.mark.parametrize("name", replay_golden.RECORDINGS)
def test_recording_replays_as_the_golden(name: str, golden: dict[str, Any]) -> None:
    want, got = golden[name], replay_golden.replay(name)
    assert got["polls"] == want["polls"]
    assert got["timeline"] == want["timeline"]  # findings as they come and go, with words
    assert got["per_poll"] == want["per_poll"], _first_difference(want["per_poll"], got["per_poll"])
    assert got["all"] == want["all"]
    assert got["report"] == want["report"]
    assert got["snapshot_windows"] == want["snapshot_windows"]
    looped, looped_want = got["looped"], want["looped"]
    assert looped["per_poll"] == looped_want["per_poll"], _first_difference(
        looped_want["per_poll"], looped["per_poll"]
    )
