"""The key table (llmtop.tui.view.keyhelp: the `?` screen, README and docs/tui.md are made from it)
explains every binding the dashboard has, and nothing it lacks."""

from __future__ import annotations

from textual.binding import Binding

from llmtop.tui.app import LlmtopApp
from llmtop.tui.screens.help import HELP_TEXT
from llmtop.tui.view.keyhelp import KEYS


def test_every_binding_of_the_dashboard_is_in_the_key_table_and_only_those() -> None:
    bound = {b.action.split("(")[0] for b in LlmtopApp.BINDINGS if isinstance(b, Binding)}
    explained = {a for k in KEYS for a in k.actions}
    assert explained == bound


def test_the_help_screen_shows_the_key_table() -> None:
    for k in KEYS:
        assert f"- {k.keys} — {k.does}" in HELP_TEXT
