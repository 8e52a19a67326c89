"""What llmtop/tui/textual_compat.py leans on in Textual: the private names exist, take the
arguments the adapter passes, and behave as its docstrings say, through a tiny App; and no
other module of llmtop uses an underscore name of Textual's."""

from __future__ import annotations

import inspect
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingsMap, BindingType
from textual.dom import DOMNode
from textual.widgets import Input

from llmtop.tui.textual_compat import own_bindings, run_binding
from tests.support.tui import notes


def test_the_private_names_exist_with_the_signatures_the_adapter_calls() -> None:
    check = App._check_bindings
    assert inspect.iscoroutinefunction(check)
    params = inspect.signature(check).parameters
    assert list(params) == ["self", "key", "priority"]
    assert params["priority"].default is False
    node = DOMNode()
    assert isinstance(node._bindings, BindingsMap)
    assert isinstance(node._bindings.key_to_bindings, dict)
    assert len(App()._notifications) == 0  # a collection, empty before any notify


class Tiny(App[None]):
    """One plain and one priority binding, and an Input that has the focus."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "note('plain')", "plain"),
        Binding("y", "note('priority')", "priority", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    def compose(self) -> ComposeResult:
        yield Input(value="abc", id="field")

    def action_note(self, what: str) -> None:
        self.ran.append(what)


async def test_run_binding_runs_the_one_binding_textual_would_and_says_so() -> None:
    app = Tiny()
    async with app.run_test() as pilot:
        app.set_focus(None)
        await pilot.pause()
        assert await run_binding(app, "x", priority=False)
        assert not await run_binding(app, "x", priority=True)  # not a priority binding
        assert await run_binding(app, "y", priority=True)
        assert not await run_binding(app, "f7", priority=False)  # nobody's key
        assert not await run_binding(app, "f7", priority=True)
        assert app.ran == ["plain", "priority"]
        # with the Input focused: its own binding, found from the focus up; a character it
        # takes as text is no binding's, priority or not
        field = app.query_one(Input)
        field.focus()
        await pilot.pause()
        field.cursor_position = len(field.value)
        assert await run_binding(app, "backspace", priority=False)
        assert field.value == "ab"
        assert not await run_binding(app, "x", priority=False)
        assert not await run_binding(app, "y", priority=True)
        assert app.ran == ["plain", "priority"]


async def test_own_bindings_are_the_class_bindings_merged_with_the_bases() -> None:
    app = Tiny()
    async with app.run_test():
        field = app.query_one(Input)
        assert [b.action for b in own_bindings(field, "backspace")] == ["delete_left"]
        assert [b.action for b in own_bindings(app, "x")] == ["note('plain')"]
        assert own_bindings(field, "x") == ()  # the app's binding is not the Input's own


async def test_notes_are_what_notify_showed() -> None:
    app = Tiny()
    async with app.run_test() as pilot:
        assert notes(app) == []
        app.notify("first")
        app.notify("second", severity="warning")
        await pilot.pause()
        assert notes(app) == ["first", "second"]


def textual_private_names() -> set[str]:
    """Underscore names of the Textual objects llmtop's tui subclasses or holds."""
    from textual.screen import ModalScreen, Screen
    from textual.widget import Widget
    from textual.widgets import Footer, Static

    objects: list[object] = [App(), Widget(), Input(), Static(), Footer(), Screen(), ModalScreen()]
    names: set[str] = set()
    for obj in objects:
        names |= {n for n in (*dir(type(obj)), *vars(obj)) if n.startswith("_")}
    return {n for n in names if not n.startswith("__")}


def test_no_module_but_the_adapter_uses_a_private_name_of_textual() -> None:
    import ast
    from pathlib import Path

    import llmtop

    root = Path(llmtop.__file__).parent
    modules = {p: ast.parse(p.read_text(encoding="utf-8")) for p in root.rglob("*.py")}
    ours: set[str] = set()  # llmtop's own underscore names (defined or assigned here)
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ours.add(node.target.id)
    theirs = textual_private_names() - ours
    used = {
        (str(path.relative_to(root)), node.attr)
        for path, tree in modules.items()
        if path.name != "textual_compat.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in theirs
    }
    imported = {
        (str(path.relative_to(root)), alias.name)
        for path, tree in modules.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("textual")
        for alias in node.names
        if alias.name.startswith("_") or "._" in (node.module or "")
    }
    assert not used, used
    assert not imported, imported
    adapter = modules[root / "tui" / "textual_compat.py"]
    leaned_on = {n.attr for n in ast.walk(adapter) if isinstance(n, ast.Attribute)} & theirs
    assert leaned_on == {"_check_bindings", "_bindings"}
