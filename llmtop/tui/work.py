"""Workers started from a coroutine function, never from a coroutine object."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from textual.dom import DOMNode
from textual.worker import Worker


def start_worker(
    node: DOMNode, work: Callable[[], Coroutine[Any, Any, None]], **options: Any
) -> Worker[None]:
    """`node.run_worker(work, ...)` with the function: the worker makes the coroutine when it
    runs. One replaced or cancelled before it ran (a burst of keys into the `:cap` preview, an
    admin change behind `q`) then leaves no coroutine that was never awaited, whose
    RuntimeWarning would be printed on the terminal after the TUI has quit."""
    return node.run_worker(work, **options)
