"""`llmtop demo` with a screen: the scenario's load on its own thread while the live TUI (passed
in by the command, so this package never imports textual) watches the stack."""

from __future__ import annotations

import sys
from collections.abc import Callable

from llmtop.demo.stack import LoadThread, Stack

RunTui = Callable[..., int]
"""llmtop.tui.launch.run_live: (monitor, health, *, max_num_seqs, title, exit_after_s) -> code."""


def run_interactive(stack: Stack, *, seed: int, duration_s: float | None, tui: RunTui) -> int:
    """Print what was started, run the load and the TUI until `q` (or `duration_s`), then say
    what was closed; an early end of the load is reported in one line."""
    sys.stdout.write(
        f"{stack.banner()}\n  fix: when a finding suggests a cap, type the :cap it names (or"
        " press - down to it); the line on top of the screen names it live; q quits\n"
    )
    sys.stdout.flush()
    load = LoadThread(stack.scenario, stack.gateway.url, seed=seed).start()
    try:
        code = tui(
            stack.monitor,
            stack.health,
            max_num_seqs=stack.engine_max_num_seqs,
            title=f"llmtop demo · {stack.scenario.name} · sim :{stack.sim.port}"
            f" · gateway :{stack.gateway.port}",
            exit_after_s=duration_s,
        )
    finally:
        load.stop()
    sys.stdout.write(
        f"llmtop demo: stopped; sim {stack.sim.url} and gateway {stack.gateway.url} closed\n"
    )
    if load.error is not None and not isinstance(load.error, KeyboardInterrupt):
        sys.stderr.write(f"llmtop: demo load stopped early: {load.error}\n")
    return code
