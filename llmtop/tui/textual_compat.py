"""The one module that uses Textual's private names; everything else in llmtop calls these.

Textual has no public way to run a key's binding or read a widget's own bindings (`tui.keys` needs
both); textual is pinned below 9 and tests/tui/test_textual_compat.py fails when one changes.
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode


async def run_binding(app: App[Any], key: str, *, priority: bool) -> bool:
    """Run the binding the screen on top has for `key`, as Textual's own dispatch does:
    priority bindings from the app down, else the others from the focused widget up.
    True: a binding took the key (its action ran)."""
    return await app._check_bindings(key, priority=priority)


def own_bindings(node: DOMNode, key: str) -> tuple[Binding, ...]:
    """The bindings `node` has for `key`: its class's BINDINGS merged with its bases'."""
    return tuple(node._bindings.key_to_bindings.get(key, ()))
