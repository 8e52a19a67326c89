"""The keys as a person sends them, in a real terminal: a command and the keys behind it in one
write (a paste, `tmux send-keys ':cap 3' Enter`, a fast typist), a bracketed paste, bursts of
`-` and `+`, `a`, `p` and its question, `--read-only`, `q`, NO_COLOR; at 80x24 and 120x36.
What the gateway did is read from its admin API, what the person sees from the pane."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.terminal import hues, wait_until
from tests.support.tty import CAP, Tui

# one worker for the module: its tests share the module's sim and gateway
pytestmark = [pytest.mark.tty, pytest.mark.xdist_group("tty-keys")]

SMALL, LARGE = (80, 24), (120, 36)
CAP_ = "max_concurrency"


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x36"])
def test_a_command_and_the_keys_behind_it_in_one_write(
    start_tui: Callable[..., Tui], size: tuple[int, int]
) -> None:
    tui = start_tui(size)
    assert hues(tui.term.screen(escapes=True)), "in colour (the NO_COLOR test's control)"
    tui.term.send(":cap 3", "Enter")
    tui.cap_becomes(3)
    tui.term.wait_for("set cap 8 -> 3")
    # the key behind Enter is the dashboard's, and acts after the command
    tui.term.send(":cap 5", "Enter", "+")
    tui.cap_becomes(6)
    # a value the gateway rejects: its own message, on the screen
    tui.term.send(":cap 0", "Enter")
    tui.term.wait_for("max_concurrency must be an integer", "the gateway's 400 message")
    assert tui.limits()[CAP_] == 6
    # nothing lost, nothing run twice
    assert tui.changes() == [(CAP_, CAP, 3), (CAP_, 3, 5), (CAP_, 5, 6)]
    tui.quit()


def test_a_pasted_command_runs_as_typed(start_tui: Callable[..., Tui]) -> None:
    tui = start_tui(SMALL)
    # `:`, the paste and Enter in one write
    tui.term.paste("cap 2", before=[":"], after=["Enter"])
    tui.cap_becomes(2)
    # with the line closed, a paste opens it holding the text; only Enter runs it
    tui.term.paste(":cap 7")
    tui.term.wait_for(lambda s: s.splitlines()[-1].strip().startswith("cap 7"), "the line")
    assert tui.limits()[CAP_] == 2
    tui.term.send("Enter")
    tui.cap_becomes(7)
    # a paste of several lines into the open line: the first line, and no key of the rest
    tui.term.paste("cap 4\nq\n+\n", before=[":"], after=["Enter"])
    tui.cap_becomes(4)
    tui.term.wait_for("set cap 7 -> 4")
    assert tui.changes() == [(CAP_, CAP, 2), (CAP_, 2, 7), (CAP_, 7, 4)]
    tui.quit()


def test_minus_and_plus_five_times_quickly_move_the_cap_five_steps(
    start_tui: Callable[..., Tui],
) -> None:
    tui = start_tui(SMALL)
    tui.term.send("-----")
    tui.cap_becomes(CAP - 5)
    tui.term.send("+++++")
    tui.cap_becomes(CAP)
    steps = [(CAP_, CAP - i, CAP - i - 1) for i in range(5)]
    steps += [(CAP_, CAP - 5 + i, CAP - 4 + i) for i in range(5)]
    assert tui.changes() == steps
    tui.quit()


def test_a_hands_the_gateway_to_the_autopilot_and_back(start_tui: Callable[..., Tui]) -> None:
    tui = start_tui(LARGE)
    tui.term.send(":cap 4", "Enter", "a")
    wait_until(lambda: tui.limits()["mode"] == "auto", "mode auto")
    tui.term.wait_for("Gateway · auto")
    # the command ran before the `a` behind it (the autopilot then lifts the cap to a ceiling)
    assert tui.changes() == [(CAP_, CAP, 4), ("mode", "manual", "auto")]
    tui.term.send("a")
    wait_until(lambda: tui.limits()["mode"] == "manual", "mode manual")
    tui.term.wait_for("Gateway · manual")
    assert tui.changes() == [(CAP_, CAP, 4), ("mode", "manual", "auto"), ("mode", "auto", "manual")]
    tui.quit()


def test_p_asks_first_and_only_y_pauses(start_tui: Callable[..., Tui]) -> None:
    tui = start_tui(SMALL)
    # a `y` typed with the `p` comes before the question: it answers nothing
    tui.term.send("p", "y")
    tui.term.wait_for("Pause admission?")
    assert not tui.paused()
    tui.term.send("n")
    tui.term.wait_for(lambda s: "Pause admission?" not in s, "the question gone")
    assert not tui.paused()
    tui.term.send("p")
    tui.term.wait_for("Pause admission?")
    tui.term.send("y")
    wait_until(tui.paused, "paused")
    tui.term.wait_for("PAUSED")
    tui.term.send("p")
    tui.term.wait_for("Resume admission?")
    tui.term.send("y")
    wait_until(lambda: not tui.paused(), "resumed")
    tui.quit()


def test_read_only_refuses_every_change(start_tui: Callable[..., Tui]) -> None:
    tui = start_tui(SMALL, "--read-only")
    tui.term.send("+", "-", "]", "[", "a", "p", ":cap 3", "Enter")
    tui.term.paste(":cap 2", after=["Enter"])
    tui.term.wait_for(
        "is disabled", "the read-only notice (the header says read-only from the start)"
    )
    tui.term.send("?")  # keys act in order: once help shows, every key before it has acted
    tui.term.wait_for("llmtop help")
    limits = tui.limits()
    assert (limits[CAP_], limits["max_queue"], limits["mode"]) == (CAP, 128, "manual")
    assert not tui.paused()
    assert tui.changes() == []
    tui.term.send("Escape")
    tui.term.wait_for(lambda s: "llmtop help" not in s, "help closed")
    assert "Pause admission?" not in tui.term.screen()
    tui.quit()


def test_no_color_is_monochrome_and_still_says_everything(
    start_tui: Callable[..., Tui],
) -> None:
    tui = start_tui(SMALL, NO_COLOR="1")
    plain = tui.term.wait_for(" OK ", "the state in words, not only in a colour")
    assert hues(tui.term.screen(escapes=True)) == []  # greys only: monochrome
    assert "manual" in plain
    assert "admitting" in plain
    tui.term.send(":cap 3", "Enter")
    tui.cap_becomes(3)
    tui.term.wait_for("set cap 8 -> 3")
    assert hues(tui.term.screen(escapes=True)) == []
    tui.quit()
