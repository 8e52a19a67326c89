"""Work the TUI hands to a thread of its own (the TUI starts none: test_tui_does_no_io.py): the
past made into a replay while the live console goes on (`tui.past.replay_of`, the `h` key)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

Stopped = Callable[[], bool]
"""Whether the work is to stop: it asks between its steps."""


def in_background(
    work: Callable[[Stopped], T], *, name: str
) -> tuple[asyncio.Future[T], Callable[[], None]]:
    """Start `work(stopped)` on a daemon thread: its result (or exception) as a future of the
    running loop, and what tells it to stop (a cancelled caller calls it).

    Not `asyncio.to_thread`: the default executor's threads are joined at exit, so `q` pressed
    meanwhile would wait for seconds of work nobody wants; a daemon thread is told to stop,
    never waited for, and a result nobody awaits any more is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    stop = threading.Event()

    def settle(ok: bool, value: Any) -> None:
        if future.done():  # the caller was cancelled
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            result = work(stop.is_set)
        except BaseException as e:  # handed to the awaiting coroutine, as to_thread does
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(settle, False, e)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, True, result)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future, stop.set
