"""The drain's phases on a fake clock: ready, the grace after SIGTERM, closing, the cut."""

from __future__ import annotations

import pytest

from llmtop.asgi.drain import Drain


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_sigterm_grace_then_closing_then_cut() -> None:
    clock = Clock()
    drain = Drain(grace_s=5, timeout_s=120, clock=clock)
    assert drain.ready
    assert drain.accepting()
    assert drain.phase() == "ready"
    assert drain.to_dict() == {"ready": True, "phase": "ready"}
    drain.begin("SIGTERM")
    assert not drain.ready
    assert drain.phase() == "grace"
    assert drain.accepting()
    clock.t += 4.999
    assert drain.phase() == "grace"
    clock.t += 0.001
    assert drain.phase() == "closing"
    assert not drain.accepting()
    clock.t += 119.9
    assert drain.phase() == "closing"
    assert drain.to_dict()["cut_in_s"] == pytest.approx(0.1, abs=1e-3)
    clock.t += 0.1
    assert drain.phase() == "cut"
    assert "drain_timeout_s (120 s)" in drain.cut_reason()


def test_sigint_has_no_grace() -> None:
    clock = Clock()
    drain = Drain(grace_s=5, timeout_s=10, clock=clock)
    drain.begin("SIGINT", grace=False)
    assert drain.phase() == "closing"
    assert drain.to_dict() == {
        "ready": False,
        "phase": "closing",
        "signal": "SIGINT",
        "since_s": 0.0,
        "accepting_for_s": 0.0,
        "cut_in_s": 10.0,
    }


def test_second_signal_cuts_at_once_and_a_repeat_begin_changes_nothing() -> None:
    clock = Clock()
    drain = Drain(grace_s=5, timeout_s=120, clock=clock)
    drain.begin("SIGTERM")
    clock.t += 1
    drain.begin("SIGTERM")  # not a second start: the times stay
    assert drain.accept_until == 105.0
    drain.force()
    assert drain.phase() == "cut"
    assert drain.forced
    assert "second signal" in drain.cut_reason()


@pytest.mark.parametrize(
    ("grace", "timeout"), [(-1.0, 1.0), (1.0, float("inf")), (float("nan"), 1)]
)
def test_bad_seconds_are_refused_with_both_named(grace: float, timeout: float) -> None:
    with pytest.raises(ValueError, match="drain_grace_s and drain_timeout_s"):
        Drain(grace_s=grace, timeout_s=timeout)
