"""The real-terminal tier's TUI handle (`Tui`: its terminal, the gateway it changes, `q` checked
to leave nothing behind) and the gateway's state each test starts from (`CAP`, `QUEUE`, `reset`).
The terminal and the processes are harness/terminal.py's."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.terminal import (
    Terminal,
    alive,
    descendants,
    get_json,
    wait_until,
)

CAP = 8
"""The gateway's cap at the start of each test."""
QUEUE = 128


@dataclass
class Tui:
    """The TUI in its terminal, and the gateway it changes."""

    term: Terminal
    gateway_url: str
    since: float = field(default_factory=time.time)
    """Wall time the test began: the gateway's events after it are this test's."""

    def limits(self) -> dict[str, Any]:
        data: dict[str, Any] = get_json(f"{self.gateway_url}/admin/limits")
        return data

    def paused(self) -> bool:
        return bool(get_json(f"{self.gateway_url}/admin/stats")["paused"])

    def changes(self) -> list[tuple[str, Any, Any]]:
        """(field, old, new) of every change the TUI made since the test began, in order."""
        events = get_json(f"{self.gateway_url}/admin/events")["events"]
        return [
            (e["field"], e["old"], e["new"])
            for e in events
            if e.get("source") == "tui" and e["time"] >= self.since
        ]

    def cap_becomes(self, cap: int) -> None:
        try:
            wait_until(lambda: self.limits()["max_concurrency"] == cap, f"max_concurrency {cap}")
        except AssertionError as e:
            now = self.limits()["max_concurrency"]
            raise AssertionError(f"{e} (it is {now}); the screen:\n{self.term.screen()}") from None

    def quit(self) -> None:
        """`q`: the TUI exits 0, prints nothing after it (no traceback, no warning) and leaves
        no process of its tree behind."""
        assert self.term.exit_status() is None, self.term.screen()
        tree = descendants(self.term.pane_pid())
        assert len(tree) >= 2, tree  # the shell and llmtop
        self.term.send("q")
        try:
            wait_until(lambda: self.term.exit_status() is not None, "llmtop exited after q")
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{self.term.screen()}") from None
        status = self.term.exit_status()
        left = self.term.screen()  # what it printed after leaving the alternate screen
        assert status == 0, f"exit status {status}: {left}"
        assert "Traceback" not in left, left
        assert "Warning" not in left, left
        wait_until(lambda: not alive(tree), f"no process of the TUI's tree left ({tree})")


def reset(gateway_url: str) -> None:
    """The gateway as the module started it: cap, queue, manual, admitting."""
    headers = {"x-llmtop-source": "test"}
    body = {"max_concurrency": CAP, "max_queue": QUEUE, "mode": "manual"}
    httpx.patch(f"{gateway_url}/admin/limits", json=body, headers=headers).raise_for_status()
    httpx.post(f"{gateway_url}/admin/resume", headers=headers).raise_for_status()
