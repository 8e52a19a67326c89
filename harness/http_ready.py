"""Waiting for a process started on a loopback port to answer: the tests' stacks, the
benchmarks' and the chaos run's all wait the same way, so they share this one loop."""

from __future__ import annotations

import time

import httpx


def wait_ready(url: str, timeout_s: float = 30.0, status: int = 200) -> None:
    """Until GET `url` answers `status` (a refused connection is not yet); RuntimeError at the
    deadline, naming the URL."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == status:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer {status} within {timeout_s:g} s")
